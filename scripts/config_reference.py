"""Writes docs/configuration.md, the configuration reference, from kproducer.config: every
setting (name, keyword, kind, default, valid values, meaning), the names other clients use
for them, and the Kafka settings kproducer knows but does not implement, with the reason.

    python scripts/config_reference.py          # rewrites docs/configuration.md
    python scripts/config_reference.py --check  # exit 1 when the file differs

tests/unit/test_config.py checks that the committed file is what this renders: a setting added,
removed or redocumented in config.py without running this fails the suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kproducer.config import _ALIASES, SETTINGS, UNSUPPORTED

TARGET = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

_KINDS = {"int": "int (32 bits)", "long": "int (64 bits)", "bool": "bool", "str": "str",
          "choice": "str", "acks": "0, 1, all (-1)", "servers": "host:port list",
          "callable": "callable", "unset": "None only", "double": "float",
          "handler": "callable or class name", "list": "list", "logger": "logging.Logger"}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(s) -> str:
    if s.required:
        return "required"
    if s.default is None:
        return "None"
    if s.kind == "acks":
        return {-1: "all", 0: "0", 1: "1"}.get(s.default, str(s.default))
    if isinstance(s.default, bool):
        return "true" if s.default else "false"
    if s.default == "":
        return '""'
    return f"`{s.default}`"


def _valid(s) -> str:
    if s.kind == "choice":
        parts = [f"`{c}`" + ("" if c in s.supported else " (not implemented)") for c in s.choices]
        return ", ".join(parts)
    if s.min is not None or s.max is not None:
        lo = "" if s.min is None else f"≥ {s.min}"
        hi = "" if s.max is None else f"≤ {s.max}"
        return " and ".join(x for x in (lo, hi) if x)
    return ""


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Every setting of `kproducer.Producer`, under its Kafka (Java) name; pass it as a dict",
        "(`Producer({\"linger.ms\": 5, ...})`) or as a keyword with dots made underscores",
        "(`Producer(linger_ms=5)`). An unknown name, a wrong type or a value out of range raises",
        "`ConfigError` naming the setting. This page is generated from `kproducer/config.py` by",
        "`python scripts/config_reference.py`; a test fails when the two differ.",
        "",
        "| setting | keyword | type | default | valid values | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS.values():
        out.append(f"| `{s.name}` | `{s.attr}` | {_KINDS.get(s.kind, s.kind)} | {_cell(_default(s))} | "
                   f"{_cell(_valid(s))} | {_cell(s.doc)} |")
    out += ["", "## Names other clients use", "",
            "Accepted for the setting they stand for (librdkafka's and older Kafka names).", "",
            "| name | setting |", "|---|---|"]
    for alias, name in sorted(_ALIASES.items()):
        out.append(f"| `{alias}` | `{name}` |")
    out += ["", "## Kafka settings kproducer does not implement", "",
            "Refused with `ConfigError` and this reason.", "",
            "| setting | why |", "|---|---|"]
    for name, why in sorted(UNSUPPORTED.items()):
        out.append(f"| `{name}` | {_cell(why)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is not what scripts/config_reference.py renders: run it", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The code examples of README.md and the guides (docs/*.md): how they are found and marked,
and how one runs. tests/broker/test_docs_examples.py runs those that need a broker against a
fresh test broker and reads back what they produced with confluent-kafka's consumer;
tests/unit/test_docs_examples_without_a_broker.py runs the others and counts them all.

Every ```python block runs, with ``localhost:9092`` replaced by the broker's address, unless
the line before it says otherwise in a comment:

- ``<!-- example: no-run (why) -->``: not run (a cluster of one's own, a consumer group
  with input, a streaming source); the reason is required;
- ``<!-- example: expect events=3 orders=2 -->``: after it ran, each topic holds exactly that
  many records (read back to the end, CRCs checked);
- ``<!-- example: continues -->``: runs in the namespace of the block before it in the same
  file, as one example;
- ``<!-- example: no-broker -->``: needs no broker (the codec);
- ``<!-- example: spark -->``: a local SparkSession is started first (loopback only) and
  stopped after; slow, so at most one such example.

Directives combine with ``;`` (``<!-- example: continues; expect events=4 -->``). The tests
count the examples that ran, so a page cannot drop out of them unnoticed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "localhost:9092"
# Pages whose examples are not run yet, and why: pages of work under way elsewhere, whose
# examples need markers (no-run with a reason, expect, ...) before they join. security.md's
# TLS and SASL examples can run against kproducer.testing's test PKI and SASL gateway.
NOT_COLLECTED = {
    "security.md": "TLS/SASL examples against a managed cluster, not marked yet",
    "serializers-and-interceptors.md": "new page (serializers and interceptors work), not marked yet",
}

_DIRECTIVE = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass
class Example:
    page: str
    line: int                       # of the first block's opening fence
    source: str
    expect: dict = dataclasses.field(default_factory=dict)
    run: bool = True
    why_not: str = ""
    broker: bool = True
    spark: bool = False

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if p.name not in NOT_COLLECTED]


def _parse(directive: str, page: str, line: int) -> dict:
    out: dict = {"expect": {}}
    m = re.search(r"no-run\s*\((.+)\)", directive)       # the reason may hold ';'
    if m:
        out["why_not"] = m.group(1).strip()
        directive = directive[:m.start()] + directive[m.end():]
    for part in filter(None, (p.strip() for p in directive.split(";"))):
        word, _, rest = part.partition(" ")
        if word == "expect":
            for item in rest.split():
                topic, _, count = item.partition("=")
                out["expect"][topic] = int(count)
        elif word in ("continues", "no-broker", "spark"):
            out[word] = True
        else:
            raise ValueError(f"{page}:{line}: unknown example directive {part!r} "
                             f"(no-run needs its reason in brackets)")
    return out


def collect(page: Path) -> list[Example]:
    """The examples of one page, in order; a ``continues`` block joins the one before it."""
    examples: list[Example] = []
    lines = page.read_text().splitlines()
    name = str(page.relative_to(ROOT))
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        start = i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        source = "\n".join(lines[start:j]) + "\n"
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = _DIRECTIVE.match(lines[k].strip()) if k >= 0 else None
        d = _parse(m.group(1), name, i + 1) if m else {"expect": {}}
        if d.get("continues"):
            if not examples or not examples[-1].run:
                raise ValueError(f"{name}:{i + 1}: 'continues' without a runnable block before it")
            prev = examples[-1]
            prev.source += f"\n# --- {name}:{i + 1}\n" + source
            prev.expect.update(d["expect"])
        else:
            examples.append(Example(name, i + 1, source, d["expect"], run="why_not" not in d,
                                    why_not=d.get("why_not", ""), broker=not d.get("no-broker"),
                                    spark=bool(d.get("spark"))))
        i = j + 1
    return examples


EXAMPLES = [e for page in _pages() for e in collect(page)]
RUN = [e for e in EXAMPLES if e.run]


def _run(example: Example, bootstrap: str | None) -> None:
    source = example.source
    if bootstrap is not None:
        source = source.replace(PLACEHOLDER, bootstrap)
    namespace = {"__name__": "__main__"}
    exec(compile(source, f"{example.page}:{example.line}", "exec"), namespace)

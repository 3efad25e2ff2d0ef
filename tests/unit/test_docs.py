"""The documentation's text: neither the pages nor the code's comments carry lab notes
(temporary paths, benchmark run names, session history), and the README stays short. Figures
of runs belong in docs/performance.md's generated section and in commit messages.

The Sphinx site's build: tests/broker/test_docs_site_builds.py; the guides' code examples
run in tests/broker/test_docs_examples.py."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# What a lab note looks like: a path under /tmp, a numbered session ("stop 26"), the name of
# a benchmark run ("full11", "bench-full26", "part15", "bench-lat12"), a before -> after
# measurement ("p99 6.14 -> 5.49 ms", "224,859 -> 259,635 records/s").
_MEASURE = re.compile(r"\d[\d,.]*\s*(?:->|→)\s*\d[\d,.]*(?=.*(?:\bms\b|µs|\bus\b|records|thousand|/s\b))")
LAB_NOTES = {
    "a /tmp/ path": re.compile(r"/tmp/"),
    "a session number": re.compile(r"\b[Ss]top \d+\b"),
    "a benchmark run's name": re.compile(r"\b(?:bench-)?(?:full|part|lat|ceil|kib)\d+\b"),
    "a before -> after measurement": _MEASURE,
}
# docs/performance.md's tables are generated from a run's results between these markers
# (scripts/performance_table.py), and so is the README's Performance section.
GENERATED = re.compile(r"<!-- bench:begin -->.*?<!-- bench:end -->", re.S)


def _lab_notes(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the line) for every lab note in ``text``."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in LAB_NOTES.items():
            if pattern.search(line):
                hits.append((number, what, line.strip()))
    return hits


def _blank_generated(text: str) -> str:
    """The generated sections emptied, keeping the line numbers of the rest."""
    return GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_pages_carry_no_lab_notes(page):
    hits = _lab_notes(_blank_generated(page.read_text()))
    assert not hits, "\n".join(f"{page.relative_to(ROOT)}:{n}: {what}: {line}" for n, what, line in hits)


def test_the_readme_stays_short_and_keeps_its_generated_section():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "<!-- bench:begin -->" in text and "<!-- bench:end -->" in text
    first = re.findall(r"```bash\n(.*?)\n```", text, re.S)[:2]
    assert first[1] == ("python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' "
                        "&& python -m pytest")


# -- the code's comments -------------------------------------------------------------------

def _python_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of the comments and docstrings (a statement that is only a string) of a
    Python, Cython or stub file; Cython's declarations tokenize as Python does."""
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Not tokenizable: every line's text after a '#'.
        return [(n, line.split("#", 1)[1]) for n, line in enumerate(source.splitlines(), 1) if "#" in line]
    starts = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT}
    prev = tokenize.NEWLINE
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
        elif tok.type == tokenize.STRING and prev in starts:
            nxt = tokens[i + 1].type if i + 1 < len(tokens) else tokenize.NEWLINE
            if nxt in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.COMMENT):
                for k, line in enumerate(tok.string.splitlines()):
                    out.append((tok.start[0] + k, line))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return out


_C_TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _c_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of the comments of a C file (string and character literals skipped)."""
    out = []
    for m in _C_TOKENS.finditer(source):
        text = m.group(0)
        if text.startswith(("/*", "//")):
            first = source.count("\n", 0, m.start()) + 1
            out.extend((first + k, line) for k, line in enumerate(text.splitlines()))
    return out


def _code_files() -> list[Path]:
    files = [p for p in sorted((ROOT / "kproducer").rglob("*"))
             if p.suffix in {".py", ".pyx", ".pxi", ".pxd", ".pyi"}]
    files += [p for p in sorted((ROOT / "csrc").rglob("*"))
              if p.suffix in {".c", ".h"} and "vendor" not in p.relative_to(ROOT / "csrc").parts]
    return files


def test_code_comments_carry_no_lab_notes():
    hits = []
    for path in _code_files():
        source = path.read_text(errors="replace")
        comments = _c_comments(source) if path.suffix in {".c", ".h"} else _python_comments(source)
        for number, text in comments:
            for what, pattern in LAB_NOTES.items():
                if pattern.search(text):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {what}: {text.strip()}")
    assert not hits, f"{len(hits)} comment line(s) with lab notes:\n" + "\n".join(hits)

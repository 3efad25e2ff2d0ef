"""The .pyi stubs of the compiled modules (kproducer/_codec.pyi, _core.pyi, _net.pyi)
match the modules: mypy's stubtest imports each and compares every public name, signature
and property with its stub (allowlist: tests/stubtest_allowlist.txt). Editors and type
checkers read the stubs; a compiled API change without a stub change fails here."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from mypy import stubtest

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["kproducer._codec", "kproducer._core", "kproducer._net"]


def test_stubs_match_the_compiled_modules(tmp_path):
    # The rest of the package is not type-clean: only the stubs themselves are checked.
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\nfollow_imports = silent\ncache_dir = {tmp_path / 'cache'}\n"
                      "[mypy-kproducer.*]\nignore_errors = True\n"
                      f"[mypy-{','.join(MODULES)}]\nignore_errors = False\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = stubtest.test_stubs(stubtest.parse_options(
            ["--mypy-config-file", str(config), "--allowlist", str(ROOT / "tests/stubtest_allowlist.txt"),
             *MODULES]))
    assert status == 0, out.getvalue()
    assert "Success" in out.getvalue()


def test_the_stubs_ship_with_the_package():
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "*.pyi" in data["kproducer"]
    for module in MODULES:
        assert (ROOT / (module.replace(".", "/") + ".pyi")).is_file()

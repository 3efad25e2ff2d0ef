"""The release check (scripts/check_release.sh, scripts/check_release.py): which interpreter
each wheel tag fits, where the local interpreters are found, and why a wheel without an
interpreter is not run. The check itself, run on a wheel: tests/broker/test_release_check_on_bookworm.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("check_release", ROOT / "scripts/check_release.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_release = _load()
BY_KEY = {i.key: i for i in check_release.INTERPRETERS}
# The local interpreters (pyenv's CPython 3.10 and 3.12) take the host's glibc for manylinux
# tags: pinned here to bookworm's 2.36, so that what fits does not depend on the machine.
PINNED = [dataclasses.replace(i, glibc=(2, 36)) if i.kind == "local" else i for i in check_release.INTERPRETERS]


@pytest.mark.parametrize("name, interpreters", [
    ("kproducer-0.1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", {"bookworm-amd64"}),
    ("kproducer-0.1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", {"bookworm-arm64"}),
    ("kproducer-0.1.0-cp313-cp313-manylinux_2_17_x86_64.whl", {"trixie-amd64"}),
    ("kproducer-0.1.0-cp313-cp313-manylinux_2_17_aarch64.whl", {"trixie-arm64"}),
    # One abi3 wheel serves every CPython from its version on.
    ("kproducer-0.1.0-cp310-abi3-manylinux_2_17_x86_64.whl",
     {"bookworm-amd64", "trixie-amd64", "forky-amd64", "pyenv-3.10-amd64", "pyenv-3.12-amd64"}),
    ("kproducer-0.1.0-cp312-abi3-manylinux_2_17_aarch64.whl", {"trixie-arm64", "forky-arm64"}),
    # Newer than bookworm's glibc 2.36, within trixie's 2.41.
    ("kproducer-0.1.0-cp310-abi3-manylinux_2_39_x86_64.whl", {"trixie-amd64", "forky-amd64"}),
    ("kproducer-0.1.0-cp314-cp314-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", {"forky-amd64"}),
    ("kproducer-0.1.0-cp314-cp314-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", {"forky-arm64"}),
    # A local build (pip wheel .): this machine's kind.
    ("kproducer-0.1.0-cp311-cp311-linux_x86_64.whl", {"bookworm-amd64"}),
    ("kproducer-0.1.0-cp312-cp312-linux_x86_64.whl", {"pyenv-3.12-amd64"}),
    # 3.10 and 3.12, in no Debian suite: pyenv's CPython, x86_64 only.
    ("kproducer-0.1.0-cp310-cp310-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", {"pyenv-3.10-amd64"}),
    ("kproducer-0.1.0-cp312-cp312-manylinux2014_x86_64.whl", {"pyenv-3.12-amd64"}),
    ("kproducer-0.1.0-cp310-cp310-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", set()),
    ("kproducer-0.1.0-cp312-cp312-manylinux_2_39_x86_64.whl", set()),        # above the host's glibc
    ("kproducer-0.1.0-cp311-cp311-musllinux_1_2_x86_64.whl", set()),
    ("kproducer-0.1.0-cp313-cp313-musllinux_1_2_aarch64.whl", set()),
])
def test_which_interpreters_a_wheel_fits(name, interpreters):
    wheel = check_release.Wheel.parse(Path(name))
    assert {i.key for i in PINNED if check_release.fits(wheel, i)} == interpreters


def test_the_local_interpreters():
    assert {i.key: i.label() for i in check_release.INTERPRETERS if i.kind == "local"} == {
        "pyenv-3.10-amd64": "CPython 3.10 (pyenv, amd64, native)",
        "pyenv-3.12-amd64": "CPython 3.12 (pyenv, amd64, native)"}
    assert BY_KEY["pyenv-3.10-amd64"].glibc == check_release._host_glibc()


def test_local_interpreters_are_found_under_pyenv(tmp_path, monkeypatch):
    """The newest patch release of the version under PYENV_ROOT (or ~/.pyenv), if any."""
    for name in ("3.10.9", "3.10.13", "3.10.14t", "3.10-dev", "3.12.1"):
        python = tmp_path / "pyenv/versions" / name / "bin" / f"python{name[:4]}"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    (tmp_path / "pyenv/versions/3.12.1/bin/python3.12").chmod(0o644)      # not a program
    monkeypatch.setenv("PATH", "/usr/bin:/bin")          # no pyenv program: its root is not asked
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    check_release.local_python.cache_clear()
    try:
        assert check_release.local_python("3.10") == tmp_path / "pyenv/versions/3.10.13/bin/python3.10"
        assert check_release.local_python("3.12") is None
        monkeypatch.delenv("PYENV_ROOT")
        (tmp_path / "home").mkdir()
        (tmp_path / "pyenv").rename(tmp_path / "home/.pyenv")
        check_release.local_python.cache_clear()
        assert check_release.local_python("3.10") == tmp_path / "home/.pyenv/versions/3.10.13/bin/python3.10"
    finally:
        check_release.local_python.cache_clear()


@pytest.mark.parametrize("present", [True, False])
def test_wheels_without_an_interpreter_say_why(present, monkeypatch):
    monkeypatch.setattr(check_release, "local_python", lambda version: Path(f"/pyenv/python{version}") if present
                        else None)
    monkeypatch.setattr(check_release.platform, "machine", lambda: "x86_64")

    def why(name):
        return check_release.why_not_run(check_release.Wheel.parse(Path(name)))
    assert "no musl CPython" in why("kproducer-0.1.0-cp311-cp311-musllinux_1_2_aarch64.whl")
    assert BY_KEY["pyenv-3.12-amd64"].available() is present
    assert BY_KEY["bookworm-amd64"].available()
    reason = why("kproducer-0.1.0-cp312-cp312-manylinux2014_aarch64.whl")
    assert "cp312" in reason and "3.11 (bookworm), 3.13 (trixie), 3.14 (forky)" in reason
    assert ("pyenv's CPython 3.12 here is x86_64 only" in reason) is present
    if not present:     # when it is, the wheel runs: no reason
        reason = why("kproducer-0.1.0-cp312-cp312-manylinux2014_x86_64.whl")
        assert reason.startswith("no CPython 3.12 here: none under pyenv")
        assert "3.11 (bookworm), 3.13 (trixie), 3.14 (forky)" in reason

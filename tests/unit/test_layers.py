"""The test layers are folders (tests/conftest.py): a test's marker is its folder's name; a
test in tests/unit that uses a broker fixture, or that starts a broker or a process (itself,
in a fixture, or through a function or class of its module), fails the collection of its
file with the test's id and where to move it, and so does a test file outside the three
folders. Checked in-process (pytester) on a project of its own that has this conftest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
INI = """[pytest]
markers =
    unit: u
    broker: b
    resilience: r
"""

PURE = """
def test_pure():
    assert 1 + 1 == 2
"""
WITH_THE_BROKER_FIXTURE = """
def test_uses_the_fixture(broker):
    pass
"""
# The words the check looks for are in these texts, which are not functions of this module
# (so this file's own tests stay unit tests).
STARTS_A_CHILD_THROUGH_A_HELPER = """
import subprocess
import sys


def _child():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_runs_a_child():
    _child()
"""
STARTS_A_BROKER_IN_A_FIXTURE = """
import pytest
from kproducer.testing import TansuBroker


@pytest.fixture
def own_broker():
    b = TansuBroker()
    yield b


@pytest.mark.parametrize("n", [1, 2])
def test_with_its_own_broker(own_broker, n):
    pass
"""

# (source, test, what the error says of it)
NOT_UNIT_TESTS = [
    (WITH_THE_BROKER_FIXTURE, "test_uses_the_fixture", "it uses the broker fixture"),
    (STARTS_A_CHILD_THROUGH_A_HELPER, "test_runs_a_child", "it uses 'subprocess.', through _child"),
    (STARTS_A_BROKER_IN_A_FIXTURE, "test_with_its_own_broker", "its fixture own_broker uses 'TansuBroker('"),
]


def _project(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    """``files`` ({path under tests/: source}) beside a copy of tests/conftest.py."""
    (pytester.path / "pytest.ini").write_text(INI)
    (pytester.path / "tests").mkdir()
    shutil.copy(CONFTEST, pytester.path / "tests" / "conftest.py")
    for name, source in files.items():
        path = pytester.path / "tests" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def _collect(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider",
                                        "--import-mode=importlib", *args)


def test_the_marker_is_the_folder(pytester):
    _project(pytester, {"unit/test_a.py": PURE, "broker/test_b.py": WITH_THE_BROKER_FIXTURE,
                        "resilience/test_c.py": STARTS_A_CHILD_THROUGH_A_HELPER})
    for layer, test in (("unit", "tests/unit/test_a.py::test_pure"),
                        ("broker", "tests/broker/test_b.py::test_uses_the_fixture"),
                        ("resilience", "tests/resilience/test_c.py::test_runs_a_child")):
        result = _collect(pytester, "-m", layer)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        assert [line for line in result.stdout.lines if "::" in line] == [test]
    # The folder alone runs the layer as well.
    result = _collect(pytester, "tests/unit")
    assert [line for line in result.stdout.lines if "::" in line] == ["tests/unit/test_a.py::test_pure"]


@pytest.mark.parametrize("source, test, why", NOT_UNIT_TESTS,
                         ids=["broker-fixture", "child-through-a-helper", "broker-in-a-fixture"])
def test_a_unit_test_that_starts_outside_parts_is_a_collection_error(pytester, source, test, why):
    _project(pytester, {"unit/test_a.py": PURE, "unit/test_x.py": source})
    result = _collect(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*ERROR collecting tests/unit/test_x.py*",
                                 f"tests/unit/test_x.py::{test} is not a unit test ({why}): "
                                 "move it to tests/broker"])
    # Once, whatever its parameters.
    assert len([line for line in result.stdout.lines if line.startswith(f"tests/unit/test_x.py::{test} is")]) == 1
    assert "test_a.py" not in result.stdout.str().split("ERRORS")[1]         # the other file is fine
    # In tests/broker the same file collects.
    (pytester.path / "tests/broker").mkdir()
    (pytester.path / "tests/unit/test_x.py").rename(pytester.path / "tests/broker/test_x.py")
    result = _collect(pytester)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def test_a_test_file_outside_the_layer_folders_is_a_collection_error(pytester):
    _project(pytester, {"unit/test_a.py": PURE, "test_loose.py": PURE})
    result = _collect(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*ERROR collecting tests/test_loose.py*",
                                 "*test_loose.py: a test file belongs in tests/unit, tests/broker or "
                                 "tests/resilience (its folder is its layer)"])

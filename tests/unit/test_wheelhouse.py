"""kproducer.wheelhouse: which wheel of a release set an interpreter loads (pip's rules for
the tags kproducer's wheels carry). ship(spark, folder) on real executors: tests/broker/test_spark.py."""

from __future__ import annotations

import pytest

from kproducer.wheelhouse import Platform, describe_this_python, pick, wheel_tags

V = "0.3.0"
RELEASE = [f"/wh/kproducer-{V}-cp3{n}-cp3{n}-{plat}.whl"
           for n in range(10, 15)
           for plat in ("manylinux_2_17_x86_64.manylinux2014_x86_64",
                        "manylinux_2_17_aarch64.manylinux2014_aarch64",
                        "musllinux_1_2_x86_64", "musllinux_1_2_aarch64")]


def _p(version=(3, 12), machine="x86_64", libc="glibc", libc_version=(2, 36)):
    return Platform("cpython", version, machine, libc, libc_version)


@pytest.mark.parametrize("platform, expected", [
    (_p(), f"cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64"),
    (_p((3, 10), "aarch64", "glibc", (2, 26)), "cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64"),
    (_p((3, 14), "aarch64", "musl", (1, 2)), "cp314-cp314-musllinux_1_2_aarch64"),
    (_p((3, 13), "x86_64", "musl", (1, 2)), "cp313-cp313-musllinux_1_2_x86_64"),
])
def test_the_release_set_has_one_wheel_for_each_platform(platform, expected):
    assert pick(RELEASE, platform, V) == f"/wh/kproducer-{V}-{expected}.whl"


@pytest.mark.parametrize("platform, needs", [
    (_p((3, 9)), "cp39-cp39"),                              # older than every wheel
    (_p(libc_version=(2, 12)), "manylinux_2_N_x86_64 (N <= 12)"),   # glibc older than manylinux2014's
    (_p(libc="musl", libc_version=(1, 1)), "musllinux_1_N_x86_64 (N <= 1)"),
    (_p(machine="ppc64le"), "ppc64le"),
    (Platform("pypy", (3, 10), "x86_64", "glibc", (2, 36)), "pypy 3.10"),
])
def test_no_wheel_fits_names_what_was_needed_and_found(platform, needs):
    with pytest.raises(ValueError) as info:
        pick(RELEASE, platform, V)
    message = str(info.value)
    assert needs in message and str(platform) in message
    assert f"kproducer-{V}-cp310-cp310-musllinux_1_2_x86_64.whl" in message


def test_abi3_fits_its_version_and_later_but_a_per_version_wheel_wins():
    abi3 = f"/wh/kproducer-{V}-cp310-abi3-manylinux2014_x86_64.whl"
    cp312 = f"/wh/kproducer-{V}-cp312-cp312-manylinux2014_x86_64.whl"
    assert pick([abi3], _p((3, 14))) == abi3
    assert pick([abi3, cp312], _p((3, 12))) == cp312
    assert pick([abi3, cp312], _p((3, 13))) == abi3
    with pytest.raises(ValueError):
        pick([abi3], _p((3, 9)))


def test_newest_c_library_tag_then_the_driver_s_version_then_newest():
    old = f"/wh/kproducer-{V}-cp312-cp312-manylinux2014_x86_64.whl"
    new = f"/wh/kproducer-{V}-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert pick([old, new], _p()) == new
    assert pick([old, new], _p(libc_version=(2, 17))) == old         # 2.28 needs a newer glibc
    local = f"/wh/kproducer-{V}-cp312-cp312-linux_x86_64.whl"
    assert pick([local, old], _p()) == old                              # a tagged build first
    assert pick([local], _p()) == local
    with pytest.raises(ValueError):
        pick([local], _p(libc="musl", libc_version=(1, 2)))            # a local build is glibc's
    newer = f"/wh/kproducer-9.9.9-cp312-cp312-manylinux2014_x86_64.whl"
    assert pick([old, newer], _p(), V) == old                           # the driver's version
    assert pick([old, newer], _p()) == newer
    assert pick([old, newer], _p(), "1.0.0") == newer                   # none of it: the newest


def test_other_files_and_distributions_are_ignored():
    other = f"/wh/confluent_kafka-2.16.0-cp312-cp312-manylinux2014_x86_64.whl"
    assert wheel_tags("/wh/README.txt") is None
    with pytest.raises(ValueError, match="confluent_kafka"):
        pick([other, "/wh/README.txt"], _p())
    name, version, tags = wheel_tags(RELEASE[0])
    assert (name, version) == ("kproducer", V)
    assert ("cp310", "cp310", "manylinux2014_x86_64") in tags and len(tags) == 2


def test_this_python_is_described_as_the_interpreter_sees_itself():
    import platform
    import sys

    p = describe_this_python()
    assert p.implementation == sys.implementation.name and p.version == sys.version_info[:2]
    assert p.machine == platform.machine()
    libc, version = platform.libc_ver()
    if libc == "glibc":
        assert p.libc == "glibc" and ".".join(map(str, p.libc_version)) == version

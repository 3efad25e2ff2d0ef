"""``python -m bench``: for now, the codec microbenchmark (:mod:`bench.micro`)."""

from bench.micro import main

raise SystemExit(main())

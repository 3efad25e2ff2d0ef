"""Imports of what some test helpers need but kproducer does not: the wheel ships
kproducer.testing, and a helper whose package is missing must fail with an ImportError that
says what to install, when it is used (importing kproducer.testing needs none of them)."""

from __future__ import annotations

import importlib


def require(module: str, distribution: str, extra: str, what: str):
    """``module`` imported, or ImportError naming ``what`` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs the {distribution!r} package, which is not installed: "
                          f"pip install {distribution!r} (or kproducer[{extra}])") from exc

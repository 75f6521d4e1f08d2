"""The error users of ``systolica bench`` / ``systolica dse`` get for bad input (the CLI prints it in one line)."""

from __future__ import annotations

__all__ = ["BenchError"]


class BenchError(ValueError):
    """Bad input to a benchmark or a sweep (an option value, an empty prompt), with the value named."""

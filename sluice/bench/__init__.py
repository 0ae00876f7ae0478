"""Benchmarks shipped with the package, so ``sluice bench ...`` works from an install."""

from __future__ import annotations

from typing import Any


def noop(*args: Any, **kwargs: Any) -> Any:
    """The no-op job (returns None): the handler of the queue-hop benchmark, and RQ's job function.

    It lives in an importable module because RQ's worker imports its job
    function by dotted name.
    """
    return None

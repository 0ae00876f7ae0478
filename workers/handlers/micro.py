"""A torch handler's batch as micro-batches (issue 31 section 3, ADR 0164): with
``params.micro_batch: n`` a batch of more than ``n`` inputs runs as forward passes
of ``n`` rows, and between two of them the handler asks ``should_stop()`` (ADR
0154), so a cancel, a deadline or ``limits.max_run_ms`` that ends every job of the
batch stops its compute there instead of after the whole batch.

What this module owns: cutting a collated batch into row slices (a tensor, or a
dict of tensors, along their first dimension; each slice trimmed to its own
longest input where an ``attention_mask`` says how long each is) and running them.
One forward pass is a GPU's unit of work and cannot be stopped: the slice size is
the longest an ended batch keeps computing, and each slice pays the model's
per-call cost. Unset (the default), a batch is one forward pass, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.handlers.base import Collated, Stopped


def _rows(data: Any, start: int, stop: int) -> Any:
    if isinstance(data, dict):
        part = {k: v[start:stop] for k, v in data.items()}
        mask = part.get("attention_mask")
        if mask is not None and mask.dim() == 2 and mask.shape[1] > 0:
            width = int(mask.sum(1).max())  # right padding: this slice's longest input
            part = {k: v[:, :width] if v.dim() == 2 else v for k, v in part.items()}
        return part
    return data[start:stop]


def slices(batch: Collated, size: int) -> list[Collated]:
    """``batch`` cut into row slices of at most ``size`` (just ``[batch]`` when it fits)."""
    if size <= 0 or batch.size <= size:
        return [batch]
    out = []
    for start in range(0, batch.size, size):
        stop = min(start + size, batch.size)
        n = stop - start
        # Token counts pro rata: the runner accounts for the whole batch, not these.
        padded, real = (batch.padded_tokens * n // batch.size, batch.real_tokens * n // batch.size)
        out.append(Collated(_rows(batch.data, start, stop), n, padded, real))
    return out


def run_sliced(
    batch: Collated,
    size: int,
    forward: Callable[[Collated], Any],
    should_stop: Callable[[], bool],
    join: Callable[[list[Any]], Any],
) -> Any:
    """``forward`` over ``batch``'s slices, outputs joined in order; before each slice
    but the first, raise :class:`Stopped` if ``should_stop()``."""
    parts = slices(batch, size)
    if len(parts) == 1:
        return forward(batch)
    outs = []
    for i, part in enumerate(parts):
        if i and should_stop():
            raise Stopped
        outs.append(forward(part))
    return join(outs)

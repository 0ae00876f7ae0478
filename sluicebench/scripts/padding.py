"""The MiniLM handler on the batches the live queue forms vs length-sorted ones (ADR 0170).

sluice bench padding [--texts 2000] [--clients 64] [--workers 2] [--rounds 1] [--json PATH]

The worker side of issue 33's end-to-end check, without the stack. A model of the
closed loop (``--clients`` callers, ``--workers`` workers that prefetch their next
claim when a batch starts, claim.lua's bucket choice and fill over the example
config's buckets and limits, a pass costing ``15 + 0.32 x tokens + 0.0004 x batch x
length^2`` ms) gives the batches the live queue hands out for the e2e workload; the
in-process limit's batches are the same texts sorted by length, 32 a batch. The
example's handler then runs both sets (collate, infer, postprocess; one torch
thread; CPU time of this thread), the encoder padded (before ADR 0170) and
unpadded on each batch, which goes first alternating batch by batch (ABBA),
``--rounds`` times: sequences per CPU second and padded tokens / real tokens.
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A forward pass's CPU ms on one thread, fitted on this machine (MiniLM, fp32).
PASS_MS, TOKEN_MS, ATTENTION_MS = 15.0, 0.32, 0.0004
RTT_MS = 2.0  # a completion's way back to its caller and its next submit


def pass_ms(lengths: list[int], unpadded: bool = True) -> float:
    b, n = len(lengths), max(lengths)
    tokens = sum(lengths) if unpadded else b * n
    return PASS_MS + TOKEN_MS * tokens + ATTENTION_MS * b * n * n


@dataclass
class QueueModel:
    """claim.lua in miniature: per-bucket queues in arrival order, the bucket whose
    head has the highest response ratio (overdue heads first), filled in order up
    to ``max_batch`` jobs and ``max_tokens`` padded cost (floored to the bound)."""

    bounds: list[int]
    max_batch: int
    max_tokens: int
    costs: list[int]
    overdue_factor: float = 20.0
    queues: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    service: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queues = {b: [] for b in self.bounds}
        self.service = {b: 5 + 0.05 * b for b in self.bounds}  # the config's defaults

    def bucket(self, i: int) -> int:
        return next((b for b in self.bounds if self.costs[i] <= b), self.bounds[-1])

    def submit(self, i: int, now: float) -> None:
        self.queues[self.bucket(i)].append((now, i))

    def claim(self, now: float) -> tuple[int, list[int]] | None:
        best, ratio, overdue, oldest = None, -1.0, None, float("inf")
        for b, q in self.queues.items():
            if q:
                wait = max(now - q[0][0], 0.0)
                r = (wait + self.service[b]) / self.service[b]
                best, ratio = (b, r) if r > ratio else (best, ratio)
                if wait > self.overdue_factor * self.service[b] and q[0][0] < oldest:
                    overdue, oldest = b, q[0][0]
        chosen = overdue if overdue is not None else best
        if chosen is None:
            return None
        budget = max(1, self.max_tokens // chosen) * chosen
        q, taken, widest = self.queues[chosen], list[int](), 0
        while q and len(taken) < self.max_batch:
            cost = self.costs[q[0][1]]
            if taken and (len(taken) + 1) * max(widest, cost) > budget:
                break
            taken.append(q.pop(0)[1])
            widest = max(widest, cost)
        return chosen, taken

    def ran(self, bucket: int, jobs: int, ms: float) -> None:
        old = self.service[bucket]
        self.service[bucket] = old + 0.2 * (ms / jobs - old)  # workers/budget.py's EWMA


def live_batches(
    model: QueueModel, lengths: list[int], clients: int, workers: int, ms: Callable[..., float]
) -> list[list[int]]:
    """The batches (text indexes) a closed loop of ``clients`` over every text once
    hands ``workers`` workers that claim their next batch as each one starts."""
    n, nxt, out = len(lengths), 0, list[list[int]]()
    events: list[tuple[float, int, int]] = []  # (ms, seq, worker; -1: a caller's submit)
    prefetched: dict[int, tuple[int, list[int]] | None] = dict.fromkeys(range(workers))
    idle: set[int] = set()
    for _ in range(min(clients, n)):
        model.submit(nxt, 0.0)
        nxt += 1
    for w in range(workers):
        heapq.heappush(events, (0.0, len(out) * workers + w, w))
    seq = workers
    while events:
        now, _, w = heapq.heappop(events)
        if w < 0:
            if nxt < n:
                model.submit(nxt, now)
                nxt += 1
            for v in sorted(idle):
                heapq.heappush(events, (now, seq := seq + 1, v))
            idle.clear()
            continue
        batch, prefetched[w] = prefetched[w] or model.claim(now), None
        if batch is None:
            idle.add(w)
            continue
        prefetched[w] = model.claim(now)
        took = ms([lengths[i] for i in batch[1]])
        model.ran(batch[0], len(batch[1]), took)
        out.append(batch[1])
        for _ in batch[1]:
            heapq.heappush(events, (now + took + RTT_MS, seq := seq + 1, -1))
        heapq.heappush(events, (now + took, seq := seq + 1, w))
    return out


def sorted_batches(lengths: list[int], size: int = 32) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + size] for i in range(0, len(order), size)]


def _handler() -> Any:
    import torch

    from sluice.config import load_config
    from sluicebench.e2e_bench import EXAMPLE, MODEL
    from workers.handlers import HandlerContext, load_handler_class

    torch.set_num_threads(1)
    cfg = load_config(EXAMPLE).models[MODEL]
    handler = load_handler_class(cfg.handler)(HandlerContext(MODEL, cfg))
    handler.load()
    if not getattr(handler, "native", False):
        raise SystemExit("the example's handler is not on the native BERT path")
    return handler, cfg


def _run(handler: Any, texts: list[str], unpadded: bool) -> tuple[float, int, int]:
    handler.model.unpadded = unpadded
    t0 = time.thread_time()
    c = handler.collate(texts, [1] * len(texts))
    handler.postprocess(handler.infer(c), c)
    return time.thread_time() - t0, c.padded_tokens, c.real_tokens


def measure(
    handler: Any, texts: list[str], sets: dict[str, list[list[int]]], rounds: int
) -> dict[str, Any]:
    """Each set's batches under both encoders, alternating per batch (ABBA)."""
    for batch in sets["sorted"][-2:]:  # warm: the largest shapes
        _run(handler, [texts[i] for i in batch], True)
    out: dict[str, Any] = {}
    for name, batches in sets.items():
        cpu = {"padded": 0.0, "unpadded": 0.0}
        padded = real = 0
        for r in range(rounds):
            for j, batch in enumerate(batches):
                chunk = [texts[i] for i in batch]
                order = (False, True) if (r + j) % 2 == 0 else (True, False)
                for unpadded in order:
                    s, p, t = _run(handler, chunk, unpadded)
                    cpu["unpadded" if unpadded else "padded"] += s / rounds
                padded, real = padded + p, real + t
        seqs = sum(len(b) for b in batches)
        out[name] = {
            "batches": len(batches),
            "mean_batch": round(seqs / len(batches), 1),
            "padded_over_real": round(padded / real, 3),
            **{f"{k}_seq_per_cpu_s": round(seqs / v, 1) for k, v in cpu.items()},
        }
    for enc in ("padded", "unpadded"):
        key = f"{enc}_seq_per_cpu_s"
        out[f"live_over_sorted_{enc}"] = round(out["live"][key] / out["sorted"][key], 3)
    out["live_unpadded_over_sorted_padded"] = round(
        out["live"]["unpadded_seq_per_cpu_s"] / out["sorted"]["padded_seq_per_cpu_s"], 3
    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sluice bench padding", description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    from sluice.cost import CostEstimator
    from sluicebench.e2e_bench import workload

    handler, cfg = _handler()
    texts = [t for _, t in workload(a.texts, 1)]
    costs = [CostEstimator(cfg).cost(t) for t in texts]
    # Real tokens (encode_batch pads to the longest: the mask says how many are real).
    lengths = [sum(e.attention_mask) for e in handler.fast_tokenizer.encode_batch(texts)]
    bounds = [int(b) for b in cfg.bucket_names]
    model = QueueModel(bounds, cfg.batching.max_batch, cfg.batching.max_batch_tokens, costs)
    sets = {
        "live": live_batches(model, lengths, a.clients, a.workers, pass_ms),
        "sorted": sorted_batches(lengths),
    }
    result = measure(handler, texts, sets, a.rounds)
    print(json.dumps(result, indent=1))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")

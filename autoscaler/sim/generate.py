"""Generative workers with slots: continuous admission against whole-batch (ADR 0149).

A replica has ``slots`` and runs decode steps back to back while it holds any
sequence. A step decodes one token for every sequence past its prefill and
prefills up to ``prefill_tokens_per_step`` prompt tokens (longer prompts take
several steps, oldest admission first); a sequence's first token comes at the end
of the step that finishes its prefill. The step lasts
``base + per_seq x decoding + per_prompt_token x prefill tokens`` (:class:`StepCost`,
fitted by default to issue 30's CPU figures: 3.5 ms at batch 1, 12 ms at 32, and a
128-token prefill 25 ms alone, 78 ms four at a time).

- ``continuous``: at each step's start the replica claims up to its free slots from
  the shared FIFO queue (what the worker does in the step's round trip, ADR 0144).
- ``whole_batch``: it claims only into empty slots, once the whole batch has ended.

The workload (:func:`mix`) is issue 30's: prompts of 16-256 tokens, outputs of
16/64/256 tokens at 50/30/20%, either closed loop (``concurrency`` clients, each
submitting again when its job ends) or open loop (Poisson at ``rate`` jobs/s).
Pure Python and seeded: ``sluice simulate --generate`` and the tests run it. A step's
cost grows with the batch on CPU, so a half-empty whole batch steps faster and gives
back part of its waste; with a flat step cost (memory-bound GPU decode) the tokens/s
ratio is the tokens-per-step ratio (ADR 0149 has the figures).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sluice.config import ModelConfig
from sluice.errors import ConfigError

ADMISSIONS = ("continuous", "whole_batch")
OUTPUT_MIX = ((16, 0.5), (64, 0.3), (256, 0.2))  # output tokens, share
PROMPT_TOKENS = (16, 256)  # uniform


@dataclass(frozen=True, slots=True)
class StepCost:
    """One step's milliseconds: a fixed part, each decoding sequence, each prompt
    token prefilled. Defaults: the line through issue 30's decode figures (3.5 ms at
    1, 12 ms at 32) and its prefill slope ((78 - 25) ms over 3 x 128 tokens)."""

    base_ms: float = 3.5 - 8.5 / 31
    per_seq_ms: float = 8.5 / 31
    per_prompt_token_ms: float = 53.0 / 384

    def step_ms(self, decoding: int, prefill_tokens: int) -> float:
        return self.base_ms + self.per_seq_ms * decoding + self.per_prompt_token_ms * prefill_tokens


@dataclass(frozen=True, slots=True)
class Job:
    arrival_s: float
    prompt: int
    output: int


@dataclass(slots=True)
class _Seq:
    job: Job
    client: int
    prefill_left: int
    made: int = 0  # output tokens so far
    last_token_s: float = 0.0


@dataclass
class GenResult:
    admission: str
    jobs: int
    tokens: int
    seconds: float
    ttft_ms: list[float] = field(repr=False)
    inter_token_ms: list[float] = field(repr=False)
    occupancy: float  # time-weighted busy share of all slots while the run lasted

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        def q(xs: list[float], p: float) -> float:
            return round(_quantile(xs, p), 1)

        return {
            "admission": self.admission,
            "jobs": self.jobs,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 2),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "ttft_p50_ms": q(self.ttft_ms, 0.5),
            "ttft_p99_ms": q(self.ttft_ms, 0.99),
            "inter_token_p50_ms": q(self.inter_token_ms, 0.5),
            "inter_token_p99_ms": q(self.inter_token_ms, 0.99),
            "slot_occupancy": round(self.occupancy, 3),
        }


def _quantile(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def draw(rng: random.Random, at_s: float) -> Job:
    """One job of issue 30's mix arriving at ``at_s``."""
    u, out = rng.random(), OUTPUT_MIX[-1][0]
    for tokens, share in OUTPUT_MIX:
        if u < share:
            out = tokens
            break
        u -= share
    return Job(at_s, rng.randint(*PROMPT_TOKENS), out)


def mix(n: int, seed: int, rate: float) -> list[Job]:
    """``n`` jobs arriving as a Poisson process of ``rate`` jobs/s (open loop)."""
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        jobs.append(draw(rng, t))
    return jobs


@dataclass
class _Replica:
    slots: int
    seqs: list[_Seq] = field(default_factory=list)
    busy_slot_s: float = 0.0


class _Run:
    """The event loop: a heap of (time, replica) step starts; a shared FIFO queue."""

    def __init__(self, admission: str, slots: int, prefill: int, cost: StepCost) -> None:
        if admission not in ADMISSIONS:
            raise ValueError(f"admission {admission!r}: use one of {ADMISSIONS}")
        self.admission, self.prefill, self.cost = admission, prefill, cost
        self.slots = slots
        self.queue: deque[tuple[Job, int]] = deque()
        self.ttft: list[float] = []
        self.gaps: list[float] = []
        self.tokens = 0
        self.done: list[tuple[float, int]] = []  # (finish time, client)

    def claim(self, rep: _Replica, now_s: float) -> None:
        if self.admission == "whole_batch" and rep.seqs:
            return  # the batch runs until its longest member ends
        while self.queue and len(rep.seqs) < rep.slots and self.queue[0][0].arrival_s <= now_s:
            job, client = self.queue.popleft()
            rep.seqs.append(_Seq(job, client, job.prompt))

    def step(self, rep: _Replica, now_s: float) -> float:
        """Run one step from ``now_s``; returns when it ends (sequences that ended are
        gone from the replica and listed in ``done``)."""
        budget, filled = self.prefill, []
        for s in rep.seqs:
            if s.prefill_left > 0 and budget > 0:
                take = min(s.prefill_left, budget)
                s.prefill_left -= take
                budget -= take
                filled.append(s)
        decoding = [s for s in rep.seqs if s.made > 0]
        end = now_s + self.cost.step_ms(len(decoding), self.prefill - budget) / 1000.0
        rep.busy_slot_s += len(rep.seqs) * (end - now_s)
        for s in decoding:
            self.gaps.append((end - s.last_token_s) * 1000.0)
        for s in [*decoding, *(f for f in filled if f.prefill_left == 0)]:
            if s.made == 0:
                self.ttft.append((end - s.job.arrival_s) * 1000.0)
            s.made += 1
            s.last_token_s = end
            self.tokens += 1
        for s in [s for s in rep.seqs if s.made >= s.job.output]:
            rep.seqs.remove(s)
            self.done.append((end, s.client))
        return end


def simulate(
    admission: str,
    *,
    slots: int,
    replicas: int = 1,
    jobs: int = 2000,
    seed: int = 1,
    concurrency: int | None = None,
    rate: float | None = None,
    prefill_tokens_per_step: int = 256,
    cost: StepCost | None = None,
) -> GenResult:
    """``jobs`` jobs through ``replicas`` replicas of ``slots`` slots; closed loop with
    ``concurrency`` clients, else open loop at ``rate`` jobs/s."""
    if (concurrency is None) == (rate is None):
        raise ValueError("pass one of concurrency (closed loop) or rate (open loop)")
    run = _Run(admission, slots, prefill_tokens_per_step, cost or StepCost())
    rng = random.Random(seed)
    if rate is not None:
        run.queue.extend((j, -1) for j in mix(jobs, seed, rate))
        submitted = jobs
    else:
        assert concurrency is not None
        submitted = min(jobs, concurrency)
        run.queue.extend((draw(rng, 0.0), c) for c in range(submitted))
    reps = [_Replica(slots) for _ in range(replicas)]
    events = [(0.0, i) for i in range(replicas)]
    heapq.heapify(events)
    finished, end_s = 0, 0.0
    while finished < jobs:
        now, i = heapq.heappop(events)
        rep = reps[i]
        run.claim(rep, now)
        if not rep.seqs:
            nxt = run.queue[0][0].arrival_s if run.queue else None
            heapq.heappush(events, (max(now, nxt) if nxt is not None else now + 0.001, i))
            continue
        end_s = run.step(rep, now)
        for t, client in run.done:
            finished += 1
            if client >= 0 and submitted < jobs:  # the client submits its next job
                run.queue.append((draw(rng, t), client))
                submitted += 1
        run.done.clear()
        heapq.heappush(events, (end_s, i))
    busy = sum(r.busy_slot_s for r in reps)
    occupancy = busy / (end_s * slots * replicas) if end_s > 0 else 0.0
    return GenResult(admission, jobs, run.tokens, end_s, run.ttft, run.gaps, occupancy)


def compare(admissions: list[str], **kw: Any) -> dict[str, Any]:
    """Each admission on the same seeded workload; ratios to the first's tokens/s."""
    results = [simulate(a, **kw) for a in admissions]
    base = results[0].tokens_per_s or 1.0
    rows = [
        r.summary() | {"tokens_per_s_vs_first": round(r.tokens_per_s / base, 2)} for r in results
    ]
    return {"setup": {k: v for k, v in kw.items() if k != "cost"}, "results": rows}


def parse_admissions(spec: str) -> list[str]:
    out = [a.strip().replace("-", "_") for a in spec.split(",") if a.strip()]
    bad = [a for a in out if a not in ADMISSIONS]
    if bad or not out:
        raise ConfigError(f"--generate {spec!r}: comma-separated {', '.join(ADMISSIONS)}")
    return out


def parse_step_ms(spec: str | None) -> StepCost:
    """``BASE,PER_SEQUENCE,PER_PROMPT_TOKEN`` milliseconds; None: the default fit."""
    if spec is None:
        return StepCost()
    try:
        base, per_seq, per_token = (float(x) for x in spec.split(","))
    except ValueError:
        raise ConfigError(f"--step-ms {spec!r}: BASE,PER_SEQUENCE,PER_PROMPT_TOKEN") from None
    if min(base, per_seq, per_token) < 0 or base + per_seq <= 0:
        raise ConfigError(f"--step-ms {spec!r}: non-negative, and a step must take time")
    return StepCost(base, per_seq, per_token)


@dataclass(frozen=True, slots=True)
class Load:
    """The workload of ``sluice simulate --generate``: closed loop with ``concurrency``
    clients (None and no rate: twice all the slots), or open loop at ``rate`` jobs/s."""

    replicas: int = 1
    jobs: int = 2000
    seed: int = 5
    concurrency: int | None = None
    rate: float | None = None


def generate_cmd(
    model: ModelConfig, admissions: list[str], load: Load, cost: StepCost
) -> dict[str, Any]:
    """``sluice simulate --generate``: each admission on one workload; prints a table."""
    g = model.generate
    if g is None:
        raise ConfigError("--generate needs a generative model (a generate: section)")
    concurrency, rate = load.concurrency, load.rate
    if concurrency is None and rate is None:
        concurrency = 2 * g.slots * load.replicas  # closed loop, twice the slots: a queue
    if concurrency is not None and rate is not None:
        raise ConfigError("pass --concurrency (closed loop) or --rate (open loop), not both")
    out = compare(
        admissions,
        slots=g.slots,
        replicas=load.replicas,
        jobs=load.jobs,
        seed=load.seed,
        concurrency=concurrency,
        rate=rate,
        prefill_tokens_per_step=g.prefill_tokens_per_step,
        cost=cost,
    )
    out["setup"]["step_ms"] = [cost.base_ms, cost.per_seq_ms, cost.per_prompt_token_ms]
    head = (
        f"{'admission':<12} {'jobs':>6} {'tokens/s':>9} {'vs first':>8} {'TTFT p50':>9} "
        f"{'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'slots busy':>10}"
    )
    print(head)
    print("-" * len(head))
    for d in out["results"]:
        print(
            f"{d['admission']:<12} {d['jobs']:>6} {d['tokens_per_s']:>9.0f} "
            f"{d['tokens_per_s_vs_first']:>7.2f}x {d['ttft_p50_ms']:>7.0f}ms "
            f"{d['ttft_p99_ms']:>7.0f}ms {d['inter_token_p50_ms']:>6.1f}ms "
            f"{d['inter_token_p99_ms']:>6.1f}ms {100 * d['slot_occupancy']:>9.0f}%"
        )
    return out

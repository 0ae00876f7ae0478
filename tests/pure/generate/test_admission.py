"""A generative job's admission math (sluice.generate.admission)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import ModelConfig
from sluice.errors import InvalidInput
from sluice.generate.admission import PromptTooLong, admit, expected_output, new_job
from sluice.generate.params import GenerateInput
from sluice.records import Stat
from tests.conftest import make_config

GEN = {"max_seq_tokens": 256, "default_max_tokens": 32, "expected_output_tokens": 20}


def cfg(**gen: object) -> ModelConfig:
    return make_config(generate={**GEN, **gen}).models["m"]


def test_the_cost_is_the_prompt_plus_the_expected_output_never_above_max_tokens() -> None:
    c = cfg()
    assert admit(c, 10, 100, None).cost == 10 + 20  # the prior until one finished
    assert admit(c, 10, 100, 50.2).cost == 10 + 51  # learned
    assert admit(c, 10, 8, 50.0).cost == 10 + 8  # never above max_tokens
    a = admit(c, 100, None, None)
    assert (a.max_tokens, a.cost, a.bucket) == (32, 120, "128")


def test_without_max_tokens_the_default_is_clipped_to_what_fits() -> None:
    assert admit(cfg(), 250, None, None).max_tokens == 6


def test_a_job_that_can_never_fit_is_refused_with_its_numbers() -> None:
    with pytest.raises(PromptTooLong, match=r"256 tokens.*200 tokens.*max_tokens is 57"):
        admit(cfg(), 200, 57, None)
    with pytest.raises(PromptTooLong, match="no room"):
        admit(cfg(), 256, None, None)
    assert PromptTooLong.type == "context_length_exceeded"
    assert issubclass(PromptTooLong, InvalidInput)  # 422
    with pytest.raises(InvalidInput):
        admit(cfg(), 0, 5, None)
    with pytest.raises(InvalidInput):
        admit(cfg(), 5, 0, None)


@given(st.integers(1, 400), st.one_of(st.none(), st.integers(1, 400)), st.floats(0, 1000))
def test_an_admitted_job_always_fits_a_slot(
    prompt: int, max_tokens: int | None, exp: float
) -> None:
    c = cfg()
    try:
        a = admit(c, prompt, max_tokens, exp)
    except PromptTooLong:
        assert prompt + (max_tokens or 1) > 256
        return
    assert prompt + a.max_tokens <= 256
    assert prompt < a.cost <= prompt + a.max_tokens
    assert int(a.bucket) >= min(a.cost, c.buckets[-1])


def test_the_learned_output_length_is_the_mean_of_finished_jobs() -> None:
    assert expected_output({}) is None
    assert expected_output({Stat.GEN_FINISHED: "4", Stat.GEN_OUTPUT_TOKENS: "10"}) == 2.5


def test_new_job_seeds_a_sampled_job_and_leaves_a_greedy_one() -> None:
    sampled = GenerateInput.from_dict(new_job(cfg(), [1, 2], temperature=0.7).input)
    assert sampled.sampling.seed is not None and sampled.sampling.max_tokens == 32
    greedy = GenerateInput.from_dict(new_job(cfg(), [1, 2], temperature=0.0).input)
    assert greedy.sampling.seed is None
    given_seed = new_job(cfg(), [1], seed=7, max_tokens=5, priority="high")
    assert GenerateInput.from_dict(given_seed.input).sampling.seed == 7
    assert given_seed.priority == "high" and given_seed.cost == 1 + 5

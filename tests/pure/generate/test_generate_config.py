"""A generative model's config is refused at load when it could not work: a
``generate:`` section on a handler that makes no tokens, ``causal-lm`` without
one, or a stream cap below what one job's stream may hold across its attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import load_config, parse_config
from sluice.config.models import ModelConfig, stream_entries_bound
from sluice.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def model(**kw: Any) -> dict[str, Any]:
    return {"handler": "causal-lm", "params": {"model": "tiny:2x64"}, "generate": {}, **kw}


def load(m: dict[str, Any]) -> ModelConfig:
    return parse_config({"models": {"g": m}}).models["g"]


def test_the_defaults_and_every_example_load() -> None:
    cfg = load(model())
    assert cfg.generate is not None
    assert cfg.generate.stream_maxlen >= stream_entries_bound(cfg)
    for path in sorted(EXAMPLES.glob("*.yaml")):
        load_config(path)


@pytest.mark.parametrize("handler", ["synthetic", "embedding", "tiny"])
def test_generate_on_a_handler_that_makes_no_tokens_is_refused(handler: str) -> None:
    with pytest.raises(ConfigError, match=f"handler '{handler}' makes no tokens"):
        load(model(handler=handler))


def test_a_user_engine_handler_may_generate() -> None:
    assert load(model(handler="my_pkg.engine:MyLM")).generative


def test_causal_lm_without_generate_is_refused() -> None:
    m = model()
    del m["generate"]
    with pytest.raises(ConfigError, match="needs a generate: section"):
        load(m)


def test_a_stream_cap_below_a_whole_jobs_entries_is_refused_with_the_bound() -> None:
    m = model(generate={"max_seq_tokens": 2048, "default_max_tokens": 256})
    with pytest.raises(ConfigError, match=r"stream_maxlen \(4096\).*= 6150"):
        load(m)
    ok = model(
        generate={"max_seq_tokens": 2048, "default_max_tokens": 256}, batching={"max_attempts": 1}
    )
    assert load(ok).generate is not None


@given(attempts=st.integers(1, 6), seq=st.integers(2, 5000), maxlen=st.integers(1, 40_000))
def test_the_cap_holds_every_attempt_of_a_full_slot_or_is_refused(
    attempts: int, seq: int, maxlen: int
) -> None:
    gen = {"max_seq_tokens": seq, "default_max_tokens": 1, "stream_maxlen": maxlen}
    m = model(generate=gen, batching={"max_attempts": attempts})
    # per attempt: start/restart, <= one tokens entry per token of the slot, end/error
    need = attempts * (1 + seq + 1)
    if maxlen >= need:
        assert load(m).generate is not None
    else:
        with pytest.raises(ConfigError, match="stream_maxlen"):
            load(m)

"""The tokenizer cost's count (sluice.cost: encode_batch_fast) is the plain encode's:
the same cost, so the same bucket, for any text and for the e2e benchmark's 2,000."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import load_config
from sluice.cost import CostEstimator
from sluicebench.e2e_bench import E2EParams, workload

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sluice.yaml"


@pytest.fixture(scope="module")
def est() -> CostEstimator:
    e = CostEstimator(load_config(EXAMPLE).models["minilm"])
    if e.method != "tokenizer":
        pytest.skip("the bundled MiniLM tokenizer is not installed")
    return e


def _by_encode(e: CostEstimator, text: str) -> int:
    """The count as it was taken before: the plain call."""
    return max(1, len(e._tokenizer.encode(text).ids))


def test_e2e_texts_get_the_same_cost_and_bucket(est: CostEstimator) -> None:
    p = E2EParams()
    for _, text in workload(p.texts, p.seed):
        got = est.estimate(text)
        want = _by_encode(est, text)
        assert (got.cost, got.bucket) == (want, est.bucket_for(want)), text


@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=300))
def test_any_text_gets_the_plain_encodes_count(est: CostEstimator, text: str) -> None:
    assert est.cost(text) == _by_encode(est, text)


def test_a_lone_surrogate_is_still_invalid_input(est: CostEstimator) -> None:
    from sluice.errors import InvalidInput

    with pytest.raises(InvalidInput, match="lone surrogate"):
        est.cost("a\ud800b")

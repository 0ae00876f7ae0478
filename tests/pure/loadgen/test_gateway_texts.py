"""sluicebench.gateway_texts: each case's gateway config is a valid config whose
model is the stand-in worker's, costed as the case says."""

from __future__ import annotations

import pytest

from sluice.config import parse_config
from sluicebench.cost_procs import MODEL
from sluicebench.gateway_texts import CASES, case_config, case_texts


@pytest.mark.parametrize(
    ("case", "method"),
    [("short-words", "words"), ("e2e-words", "words"), ("e2e-tokenizer", "tokenizer")],
)
def test_each_case_costs_as_named(case: str, method: str) -> None:
    assert parse_config(case_config(case)).models[MODEL].cost.method == method


def test_the_example_case_is_the_example_minilm_without_a_floor_of_workers() -> None:
    model = parse_config(case_config("example")).models[MODEL]
    assert (model.cost.method, model.buckets) == ("tokenizer", [32, 128, 512])
    assert model.autoscaling.min_replicas == 0


def test_only_the_short_case_sends_one_text() -> None:
    assert [len(case_texts(c)) for c in CASES] == [1, 2000, 2000, 2000]

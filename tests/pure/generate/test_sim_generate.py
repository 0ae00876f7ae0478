"""The generative simulator (ADR 0149): slots with continuous admission against
whole-batch under issue 30's mix, and ``sluice simulate --generate``. Pure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoscaler.sim import generate as gen
from sluice.cli import app
from tests.conftest import budget

ISSUE = gen.StepCost()  # issue 30's CPU figures
FLAT = gen.StepCost(base_ms=12.0, per_seq_ms=0.0, per_prompt_token_ms=0.0)  # memory-bound


def _pair(**kw: object) -> tuple[gen.GenResult, gen.GenResult]:
    c = gen.simulate("continuous", slots=32, jobs=1500, seed=3, **kw)  # type: ignore[arg-type]
    w = gen.simulate("whole_batch", slots=32, jobs=1500, seed=3, **kw)  # type: ignore[arg-type]
    return c, w


def test_the_step_cost_reproduces_the_issue_figures() -> None:
    assert ISSUE.step_ms(1, 0) == pytest.approx(3.5)
    assert ISSUE.step_ms(32, 0) == pytest.approx(12.0)
    assert ISSUE.step_ms(0, 4 * 128) - ISSUE.step_ms(0, 128) == pytest.approx(53.0)


def test_continuous_keeps_the_slots_full_and_the_first_token_early() -> None:
    # Closed loop, 64 clients on 32 slots: a queue all along.
    c, w = _pair(concurrency=64)
    assert c.tokens == w.tokens  # the same jobs, the same outputs
    assert c.occupancy > 0.9 and w.occupancy < 0.7
    assert c.tokens_per_s > 1.2 * w.tokens_per_s  # about 1.4x on the CPU step cost
    assert 1.5 * _p(c.ttft_ms, 0.5) < _p(w.ttft_ms, 0.5)


def test_with_a_flat_step_cost_continuous_gives_about_3x() -> None:
    # Decode bound by memory, not batch size (a GPU): tokens/s is the tokens-per-step
    # ratio, issue 30's "about 3x" (3.3x measured).
    c, w = _pair(concurrency=64, cost=FLAT)
    assert c.tokens_per_s > 2.5 * w.tokens_per_s


def test_open_loop_first_token_is_a_step_and_a_prefill_not_a_batch() -> None:
    # 10 jobs/s: both keep up, so the tokens/s is the offered load's; whole-batch jobs
    # wait for the batch in front to drain (seconds), continuous ones for one step.
    c, w = _pair(rate=10.0)
    assert c.tokens_per_s == pytest.approx(w.tokens_per_s, rel=0.05)
    assert 10 * _p(c.ttft_ms, 0.5) < _p(w.ttft_ms, 0.5)
    assert 5 * _p(c.ttft_ms, 0.99) < _p(w.ttft_ms, 0.99)
    assert _p(c.ttft_ms, 0.99) < 300.0  # issue 30's open-loop target, in the model


@budget(0.2)  # each example simulates a few hundred jobs twice
@given(
    slots=st.integers(1, 16),
    clients=st.integers(1, 40),
    seed=st.integers(0, 10_000),
    admission=st.sampled_from(gen.ADMISSIONS),
)
def test_every_job_ends_with_all_its_tokens(
    slots: int, clients: int, seed: int, admission: str
) -> None:
    r = gen.simulate(admission, slots=slots, jobs=60, seed=seed, concurrency=clients)
    assert len(r.ttft_ms) == 60 and r.jobs == 60
    # Every output token once: the first from the prefill, the rest one per step.
    assert r.tokens == len(r.ttft_ms) + len(r.inter_token_ms)
    assert 0 < r.occupancy <= 1.0 and all(t > 0 for t in r.ttft_ms)


def test_simulate_generate_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "gen.yaml"
    cfg.write_text(
        "models:\n  lm:\n    handler: causal-lm\n    params: {model: 'tiny:4x256'}\n"
        "    generate: {slots: 32}\n"
    )
    out = tmp_path / "g.json"
    args = ["simulate", "--config", str(cfg), "--generate", "continuous,whole-batch"]
    res = CliRunner().invoke(app, [*args, "--jobs", "500", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["results"]
    assert [r["admission"] for r in rows] == ["continuous", "whole_batch"]
    assert rows[1]["tokens_per_s_vs_first"] < 1.0 and "TTFT p99" in res.output
    bad = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--generate", "eager"])
    assert bad.exit_code != 0 and "whole_batch" in bad.output
    flat = CliRunner().invoke(app, [*args, "--jobs", "300", "--step-ms", "12,0,0", "--rate", "5"])
    assert flat.exit_code == 0, flat.output
    cost = CliRunner().invoke(app, [*args, "--step-ms", "12,x"])
    assert cost.exit_code != 0 and "PER_PROMPT_TOKEN" in cost.output


def _p(xs: list[float], q: float) -> float:
    return sorted(xs)[int(q * (len(xs) - 1))]

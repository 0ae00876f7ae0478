"""The webhook and hop A/B benchmarks run end to end (tiny sizes) and write their JSON."""

from __future__ import annotations

import json
from pathlib import Path

from sluicebench.hop_ab import main as hop_ab
from sluicebench.webhook_bench import main as webhooks

ROOT = Path(__file__).resolve().parents[3]


def test_the_webhook_bench_measures_both_sides_and_delivers_everything(tmp_path: Path) -> None:
    out = tmp_path / "webhooks.json"
    res = webhooks(hop_jobs=300, rounds=1, duration_s=0.5, rate=20, json_path=out, backlog=50)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    hop, sub, lat = res["queue_hop"], res["gateway_submit"], res["delivery"]
    assert hop["plain_jobs_per_s"][0] > 0 and hop["webhook_jobs_per_s"][0] > 0
    assert sub["plain_rps"][0] > 0 and sub["webhook_rps"][0] > 0 and sub["errors"] == 0
    # 20/s for 0.5 s is 10 submits; a loaded machine may fall behind the rate, never
    # lose a delivery.
    assert 0 < lat["submitted"] <= 10 and lat["submit_errors"] == 0
    assert lat["delivered"] == lat["submitted"]
    assert lat["submit_to_webhook_ms"]["p50"] >= lat["complete_to_webhook_ms"]["p50"] > 0
    assert res["notifier_drain"]["delivered"] == 50


def test_the_hop_ab_bench_compares_two_checkouts(tmp_path: Path) -> None:
    res = hop_ab(other=ROOT, jobs=200, alternations=1, json_path=tmp_path / "ab.json")
    assert len(res["jobs_per_s"]["this"]) == len(res["jobs_per_s"]["other"]) == 2
    assert res["ratio_this_over_other"] > 0

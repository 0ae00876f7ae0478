"""The 60-second soak through the real stack (``make soak`` runs the 10-minute one).

Bounds: the harness's own verdict (no errors, every job done, RSS growth under
10% and under 600 bytes per job handled, Redis keys and memory plateau, key
families within their bounds, no metric label growth, no sockets left open).
10% of a 60 MB process is more than 60 s can leak, hence the per-job bound, on
the trend over the whole run (a robust slope against jobs done, leaving out the
one step a latency burst puts in the high-water mark). Measured without a leak:
50-200 B/job over the run, 595 once under a CPU hog (all of it one step);
with 1 KB per job kept by the gateway and the workers (injected once, in a
copy of the tree): 1,150-1,450 B/job in each half, and without the result TTL
the key plateau, the job-key bound and the after-run expiry all failed.
Figures in docs/benchmarks/soak.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicebench.loadgen.soak import quick_params, run_soak

pytestmark = [pytest.mark.system, pytest.mark.redis]


def test_sixty_second_soak_stays_bounded(tmp_path: Path) -> None:
    out = run_soak(tmp_path, quick_params())
    load, final, v = out["load"], out["final"], out["verdict"]
    failed = [f"{c['name']}: {c['detail']}" for c in v["checks"] if not c["ok"]]
    assert not failed, failed
    assert load["errors"] == {} and load["succeeded"] == load["sent"]
    assert out["rate_per_s"] >= 20 and load["sent"] > 0.8 * out["rate_per_s"] * 60
    assert final["counters"]["succeeded"] == final["counters"]["arrived"]
    # Results expired within the run: job hashes plateaued near rate x result TTL.
    jobs = v["plateaus"]["job_hashes"]
    assert jobs["late"] <= 1.2 * jobs["early"] + 50
    assert jobs["late"] < out["rate_per_s"] * (out["params"]["result_ttl_s"] + 5) * 1.5
    # Idempotency keys were made (about a fifth of the jobs) and expired too.
    assert max(s["families"]["idempotency"] for s in out["samples"]) > 0
    assert final["job_keys"] == 0 and final["idempotency_keys"] == 0
    for name, g in v["rss"].items():
        if name != "redis":
            assert g["growth_pct"] < 10.0 and g["bytes_per_job_trend"] < 600, (name, g)

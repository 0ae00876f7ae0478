"""In-process state that lives as long as its process stays bounded (pure or local)."""

from __future__ import annotations

from pathlib import Path

from autoscaler.backends.local import EXITS_KEPT, LocalBackend, LocalWorker
from tests.conftest import make_config
from tests.factories import worker_info
from workers.housekeeping import LOST_KEPT, Housekeeper
from workers.status import WorkerStatus


class Exited:
    """A Popen stand-in for a worker that has drained and exited 0."""

    pid = 1

    def poll(self) -> int:
        return 0


def test_the_local_backend_remembers_only_recent_worker_exits(tmp_path: Path) -> None:
    # A months-long autoscaler scaling up and down used to keep every exit.
    backend = LocalBackend(make_config(), tmp_path / "c.yaml", "redis://x", log_dir=tmp_path)
    st = backend.models["m"]
    n = EXITS_KEPT + 50
    st.workers = [
        LocalWorker(f"w{i}", "m", Exited(), None, 0.0, draining_since=0.0)  # type: ignore[arg-type]
        for i in range(n)
    ]
    backend.tick(0.0)
    assert st.workers == [] and len(st.exits) == EXITS_KEPT
    assert st.exits[-1] == (f"w{n - 1}", 0, True) and st.exits[0][0] == "w50"


class LosesEveryLease:
    """A queue client stand-in whose renewals all come back lost."""

    def renew_why(self, model: str, worker_id: str, job_ids: list[str]) -> dict[str, str]:
        return dict.fromkeys(job_ids, "lost")


def test_a_worker_remembers_only_recently_lost_leases() -> None:
    info = worker_info()
    status = WorkerStatus(info)
    hk = Housekeeper(
        LosesEveryLease(),
        status,
        heartbeat_s=1.0,
        ttl_s=2.0,
        lease_s=3.0,  # type: ignore[arg-type]
        on_command=lambda c: None,
    )
    for batch in range(LOST_KEPT // 100 + 5):
        ids = [f"m.{batch}-{i}" for i in range(100)]
        status.hold(ids)
        hk.renew()
        status.release(ids)
    assert len(hk.lost) == LOST_KEPT and hk.lost[-1] == f"m.{LOST_KEPT // 100 + 4}-99"

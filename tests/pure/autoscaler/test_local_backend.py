"""The local backend's mechanics with a stand-in worker process (fast, no Redis):
device placement in CUDA_VISIBLE_DEVICES, memory budget, CPU cores, drain order,
crash restart."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from autoscaler.backends.base import Control
from autoscaler.backends.local import LocalBackend
from sluice.config import WarmPoolConfig, parse_config
from sluice.errors import RedisUnavailable
from sluice.registry import PARK, PROMOTE, WorkerInfo
from tests.factories import worker_info
from tests.waits import wait_until

# Writes its arguments and CUDA_VISIBLE_DEVICES to <dir>/<worker id>.json, then waits
# for SIGTERM and exits 0 (the drain), or exits 3 at once if told to crash.
FAKE = r"""
import json, os, signal, sys, time
args = sys.argv[1:]
wid = args[args.index("--worker-id") + 1]
out = os.environ["FAKE_DIR"]
with open(os.path.join(out, wid + ".json"), "w") as f:
    env = os.environ
    json.dump({"args": args, "cuda": env.get("CUDA_VISIBLE_DEVICES"),
               "threads": env.get("SLUICE_NUM_THREADS")}, f)
if os.path.exists(os.path.join(out, "crash")):
    sys.exit(3)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.05)
"""


def _backend(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    monkeypatch,
    model: Mapping[str, object] | None = None,
    *,
    control: Control | None = None,
    clock: Callable[[], float] = time.monotonic,
    models: int = 1,
    **autoscaler: object,
) -> LocalBackend:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.delenv("SLUICE_NUM_THREADS", raising=False)
    m = model or {"handler": "synthetic", "autoscaling": {"max_replicas": 8, "gpu_memory_gb": 6}}
    names = ["m", "n"][:models]
    cfg = parse_config({"models": dict.fromkeys(names, m), "autoscaler": autoscaler})
    return LocalBackend(
        cfg,
        tmp_path / "sluice.yaml",
        "redis://127.0.0.1:1/0",
        command=[sys.executable, str(script)],
        log_dir=tmp_path / "logs",
        clock=clock,
        control=control,
    )


def _wait_files(tmp_path: Path, n: int) -> list[dict[str, object]]:
    def started() -> list[Path]:
        files = sorted(tmp_path.glob("local-*.json"))
        return files if len(files) >= n else []

    files = wait_until(started, 10, f"{n} workers to start", every_s=0.05)
    time.sleep(0.05)  # the newest file may be mid-write
    return [json.loads(f.read_text()) for f in files]


def _info(
    wid: str, busy: bool = False, jobs: int = 0, state: str = "ready", parked: bool = False
) -> WorkerInfo:
    return worker_info(
        id=wid, pid=0, device="cuda", state=state, busy=busy, jobs=jobs, parked=parked
    )


def test_places_by_memory_and_drains_the_idlest(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    be = _backend(
        tmp_path,
        monkeypatch,
        devices=[{"name": "0", "memory_gb": 16}, {"name": "1", "memory_gb": 8}],
    )
    try:
        be.scale("m", 5, [])
        # 16 GB holds two 6 GB workers, 8 GB one: 3 started, the other 2 fit nowhere.
        assert be.current("m") == 3
        started = _wait_files(tmp_path, 3)
        assert sorted(str(s["cuda"]) for s in started) == ["0", "0", "1"]
        assert all("--device" in s["args"] and "cuda" in s["args"] for s in started)  # type: ignore[operator]
        ids = [w.id for w in be.models["m"].workers]
        busy, idle_many, idle_few = ids
        be.scale(
            "m",
            1,
            [_info(busy, busy=True, jobs=1), _info(idle_many, jobs=90), _info(idle_few, jobs=3)],
        )
        assert be.current("m") == 1
        draining = {w.id for w in be.models["m"].workers if w.draining_since is not None}
        assert draining == {idle_many, idle_few}  # the busy one keeps running
        deadline = time.monotonic() + 10
        while len(be.models["m"].exits) < 2 and time.monotonic() < deadline:
            be.tick(0.0)
            time.sleep(0.05)
        assert sorted(be.models["m"].exits) == sorted([(idle_many, 0, True), (idle_few, 0, True)])
        assert sorted(be.pool.used_gb.values()) == [0.0, 6.0]  # only the busy one's 6 GB
        procs = [w.proc for w in be.models["m"].workers]
    finally:
        be.close(timeout_s=5)
    assert all(p.poll() == 0 for p in procs)  # close() drained the rest


def test_cpu_workers_hold_cores_and_never_oversubscribe_them(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = {"handler": "embedding", "autoscaling": {"max_replicas": 4, "min_replicas": 0}}
    be = _backend(tmp_path, monkeypatch, model, cpu_cores=3)
    try:
        be.scale("m", 4, [])
        # Unset threads: 3 cores // max_replicas 4 -> 1 core each, so 3 of the 4 start.
        assert be.current("m") == 3 and be.cores.used == 3
        started = _wait_files(tmp_path, 3)
        assert [s["threads"] for s in started] == ["1", "1", "1"]
        assert all(s["cuda"] is None for s in started)
        ids = [w.id for w in be.models["m"].workers]
        be.scale("m", 2, [_info(i) for i in ids])  # one drains and gives its core back
        deadline = time.monotonic() + 10
        while not be.models["m"].exits and time.monotonic() < deadline:
            be.tick(0.0)
            time.sleep(0.05)
        assert be.cores.used == 2
        be.scale("m", 4, [])  # room for one more, not two
        assert be.current("m") == 3 and be.cores.used == 3
    finally:
        be.close(timeout_s=5)
    assert be.cores.used == 0


def test_num_threads_sets_the_cores_a_worker_holds(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = {
        "handler": "embedding",
        "params": {"num_threads": 2},
        "autoscaling": {"max_replicas": 4, "min_replicas": 0},
    }
    be = _backend(tmp_path, monkeypatch, model, cpu_cores=5)
    try:
        be.scale("m", 4, [])
        assert be.current("m") == 2 and be.cores.used == 4  # 2 + 2; a third needs 2, 1 is free
        assert [s["threads"] for s in _wait_files(tmp_path, 2)] == ["2", "2"]
    finally:
        be.close(timeout_s=5)


def test_a_crash_is_restarted_with_backoff(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "crash").write_text("")
    be = _backend(tmp_path, monkeypatch, restart_backoff_s=0.2, restart_backoff_max_s=0.4)
    try:
        be.scale("m", 1, [])
        deadline = time.monotonic() + 10
        while len(be.models["m"].exits) < 3 and time.monotonic() < deadline:
            be.tick(0.0)
            assert be.current("m") == 1  # a pending restart still counts as capacity
            time.sleep(0.02)
        exits = be.models["m"].exits
        assert len(exits) >= 3 and all(code == 3 and not drained for _, code, drained in exits)
        assert len({wid for wid, _, _ in exits}) == len(exits)  # each restart is a new worker
    finally:
        be.close(timeout_s=5)


# -- the warm pool's failure paths (issue 28), with a stand-in control channel ---------
POOL = WarmPoolConfig(size=1)
EMBED_2 = {"handler": "embedding", "autoscaling": {"min_replicas": 0, "max_replicas": 2}}


class LostReplyControl:
    """Records each command; the first ``lose`` of them reach the worker but their
    reply is lost: the caller sees RedisUnavailable (a timeout during a failover)."""

    def __init__(self, lose: int = 0) -> None:
        self.lose = lose
        self.sent: list[tuple[str, str, str]] = []

    def __call__(self, model: str, worker_id: str, command: str) -> None:
        self.sent.append((model, worker_id, command))
        if self.lose > 0:
            self.lose -= 1
            raise RedisUnavailable("stand-in: reply lost in a failover")


class FlakyControl:
    """Records each command; raises RedisUnavailable for the first ``fail`` of them
    (one period of a Sentinel failover)."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.sent: list[tuple[str, str, str]] = []

    def __call__(self, model: str, worker_id: str, command: str) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise RedisUnavailable("stand-in: failing over")
        self.sent.append((model, worker_id, command))


def test_a_failed_promotion_gives_its_cores_back(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    control = FlakyControl(fail=1)
    # The example's shape: 2 cores, max_replicas 2, a pool of 1 (1 core per worker).
    be = _backend(tmp_path, monkeypatch, EMBED_2, cpu_cores=2, control=control)
    try:
        be.scale("m", 1, [])
        be.keep_pool("m", POOL)
        assert (be.current("m"), len(be.parked("m")), be.cores.used) == (1, 1, 1)
        with pytest.raises(RedisUnavailable):  # the loop logs it and tries next period
            be.scale("m", 2, [])
        assert be.cores.used == 1 and be.current("m") == 1  # the take was given back
        be.scale("m", 2, [])  # Redis is back: the same parked worker is promoted
        assert [c[2] for c in control.sent] == [PROMOTE]
        assert be.current("m") == 2 and be.cores.used == 2
        be.scale("m", 1, [_info(w.id) for w in be.models["m"].workers])
        assert be.current("m") == 1 and be.cores.used == 1  # the core came back: no leak
    finally:
        be.close(timeout_s=5)
    assert be.cores.used == 0


def test_no_parked_worker_that_could_never_be_promoted(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # 2 threads per worker on 2 cores, max_replicas 2: with one serving, a parked
    # worker would never find its cores, so none is started (nor counted).
    model = {
        "handler": "embedding",
        "params": {"num_threads": 2},
        "autoscaling": {"min_replicas": 0, "max_replicas": 2},
    }
    be = _backend(tmp_path, monkeypatch, model, cpu_cores=2, control=FlakyControl())
    try:
        be.scale("m", 1, [])
        be.keep_pool("m", POOL)
        assert be.parked("m") == [] and len(be.models["m"].workers) == 1
        # With none serving, the cores are free: a parked worker can be promoted.
        # With none serving its cores are free: the scale-down parks it (holding none).
        be.scale("m", 0, [_info(w.id) for w in be.models["m"].workers])
        assert len(be.parked("m")) == 1 and be.cores.used == 0 and be.current("m") == 0
    finally:
        be.close(timeout_s=5)


def test_parked_workers_do_not_count_on_the_same_cores(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Two models share 3 cores (1 per worker); one serving each leaves one free core:
    # the first pool to refill parks a worker on it, the second gets none.
    be = _backend(tmp_path, monkeypatch, EMBED_2, cpu_cores=3, control=FlakyControl(), models=2)
    try:
        for m in ("m", "n"):
            be.scale(m, 1, [])
        for m in ("m", "n"):
            be.keep_pool(m, POOL)
        assert (len(be.parked("m")), len(be.parked("n"))) == (1, 0)
        be.scale("n", 2, [])  # serving wins the core; the pool that counted on it trims
        assert be.current("n") == 2 and be.cores.used == 3
        be.keep_pool("m", POOL)
        assert be.parked("m") == []
    finally:
        be.close(timeout_s=5)


def _clocked_backend(tmp_path: Path, monkeypatch) -> tuple[LocalBackend, list[float]]:  # type: ignore[no-untyped-def]
    """A pool backend on an injected clock (``now[0]``), restarts backing off 1-30 s."""
    now = [0.0]
    be = _backend(
        tmp_path,
        monkeypatch,
        control=FlakyControl(),
        clock=lambda: now[0],
        restart_backoff_s=1.0,
        restart_backoff_max_s=30.0,
    )
    return be, now


def test_a_parked_worker_in_a_crash_loop_backs_off(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "crash").write_text("")
    be, now = _clocked_backend(tmp_path, monkeypatch)
    try:
        for _ in range(30):  # 30 periods of 1 s, each parked worker exiting at once
            be.keep_pool("m", POOL)
            wait_until(
                lambda: all(w.proc.poll() is not None for w in be.models["m"].workers),
                what="the parked worker's exit",
            )
            now[0] += 1.0
            be.tick(now[0])
        # Delays of at least 0.5, 1, 2, 4, 8 s (half of 1, 2, 4 .. s): at most 6 starts
        # in 30 s, where respawning every period starts 30.
        starts = len(be.models["m"].exits)
        assert 2 <= starts <= 6
        assert be.current("m") == 0 and not be.models["m"].restarts_due
    finally:
        be.close(timeout_s=5)


def test_a_healthy_standby_does_not_reset_a_crash_loop(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    be, now = _clocked_backend(tmp_path, monkeypatch)
    try:
        be.keep_pool("m", POOL)  # the first slot: a worker that loads and parks
        healthy = be.models["m"].workers[0]
        _wait_files(tmp_path, 1)
        (tmp_path / "crash").write_text("")  # every later worker crashes while loading
        two = WarmPoolConfig(size=2)
        for _ in range(30):  # 30 periods of 1 s; the healthy worker is standby in each
            be.observe("m", [_info(healthy.id, state="standby", parked=True)])
            be.keep_pool("m", two)
            wait_until(
                lambda: all(
                    w.proc.poll() is not None for w in be.models["m"].workers if w is not healthy
                ),
                what="the crashing parked worker's exit",
            )
            now[0] += 1.0
            be.tick(now[0])
        # The second slot backs off as a pool of 1 would (at most 6 starts in 30 s, see
        # the test above): the healthy worker's standby says nothing of its replacements.
        # Reset by it every period, the slot restarts after 0.5-1 s: about 30 starts.
        starts = len(be.models["m"].exits)
        assert 2 <= starts <= 6
        assert healthy.proc.poll() is None and be.parked("m")[0] is healthy
    finally:
        be.close(timeout_s=5)


def test_a_replacement_that_parks_resets_the_pools_backoff(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "crash").write_text("")
    be, now = _clocked_backend(tmp_path, monkeypatch)
    st = be.models["m"]
    try:
        for _ in range(3):  # three crashes: the next delay is 4-8 s
            be.keep_pool("m", POOL)
            wait_until(lambda: all(w.proc.poll() is not None for w in st.workers), what="exit")
            now[0] += 1.0
            be.tick(now[0])
            now[0] = st.pool_refill_at
        assert st.pool_backoff.attempt == 3
        (tmp_path / "crash").unlink()
        be.keep_pool("m", POOL)
        (fixed,) = st.workers
        be.observe("m", [_info(fixed.id, state="starting", parked=True)])
        assert st.pool_backoff.attempt == 3  # loading is not parked
        be.observe("m", [_info(fixed.id, state="standby", parked=True)])
        assert st.pool_backoff.attempt == 0  # spawned after the crash, now parked: reset
    finally:
        be.close(timeout_s=5)


def test_a_promotion_whose_reply_was_lost_is_counted(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    control = LostReplyControl(lose=1)
    # 2 cores, max_replicas 2, a pool of 1 (1 core per worker).
    be = _backend(tmp_path, monkeypatch, EMBED_2, cpu_cores=2, control=control)
    try:
        be.scale("m", 1, [])
        be.keep_pool("m", POOL)
        (serving,) = [w for w in be.models["m"].workers if not w.parked]
        (parked,) = be.parked("m")
        with pytest.raises(RedisUnavailable):  # the worker got PROMOTE; the reply was lost
            be.scale("m", 2, [])
        assert control.sent == [("m", parked.id, PROMOTE)]
        assert be.current("m") == 1 and be.cores.used == 1  # what the backend can know
        # Its next heartbeat says it serves: it is counted, and holds its core.
        be.observe("m", [_info(serving.id), _info(parked.id, busy=True, jobs=1)])
        assert be.current("m") == 2 and be.cores.used == 2 and be.parked("m") == []
        # At max_replicas nothing more starts: no serving worker, no refill.
        be.scale("m", 2, [_info(serving.id), _info(parked.id)])
        be.keep_pool("m", POOL)
        assert len(be.models["m"].workers) == 2 and be.cores.used == 2
        be.scale("m", 1, [_info(serving.id, jobs=5), _info(parked.id, jobs=1)])
        assert be.current("m") == 1 and be.cores.used == 1  # its core comes back on the way down
    finally:
        be.close(timeout_s=5)
    assert be.cores.used == 0


def test_a_lost_promotion_without_free_cores_is_parked_back(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    control = LostReplyControl(lose=1)
    # Two models on 3 cores, one serving each: m's pool counts on the free core.
    be = _backend(tmp_path, monkeypatch, EMBED_2, cpu_cores=3, control=control, models=2)
    try:
        for m in ("m", "n"):
            be.scale(m, 1, [])
        be.keep_pool("m", POOL)
        (parked,) = be.parked("m")
        with pytest.raises(RedisUnavailable):
            be.scale("m", 2, [])
        be.scale("n", 2, [])  # the core was given back: n's scale-up takes it
        assert be.cores.used == 3
        be.observe("m", [_info(parked.id)])  # but m's worker was promoted after all
        # No core for it: it is parked back, not left serving on n's core.
        assert control.sent[-1] == ("m", parked.id, PARK)
        assert be.current("m") == 1 and be.cores.used == 3 and be.parked("m") == [parked]
        be.observe("m", [_info(parked.id)])  # a stale beat before the park: nothing more
        assert control.sent[-1] == ("m", parked.id, PARK) and len(control.sent) == 2
        assert be.current("m") == 1 and be.cores.used == 3
    finally:
        be.close(timeout_s=5)


def test_pool_room_is_what_the_free_cores_could_promote(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # 1 core per worker on 2: nothing serving, room for 2; one serving, for 1. A worker
    # that holds no cores (synthetic) has no such bound (ADR 0156's `room`).
    be = _backend(tmp_path, monkeypatch, EMBED_2, cpu_cores=2, control=FlakyControl())
    try:
        assert be.pool_room("m") == 2
        be.scale("m", 1, [])
        assert be.pool_room("m") == 1
    finally:
        be.close(timeout_s=5)
    synthetic = _backend(tmp_path, monkeypatch)
    assert synthetic.pool_room("m") is None

"""Spawn and drain ``sluice worker`` processes on this machine.

A scale-up spawns workers (on a device with room, see autoscaler/devices.py; a
CPU worker only where its cores are free, with that many torch threads, see
sluice/cores.py); a
scale-down sends SIGTERM -- the worker's drain: it stops claiming, finishes
what it holds, deregisters and exits 0 -- to the idlest workers and waits for
them. A busy worker is never killed: only a drained worker that outlives
``drain_timeout_s`` while idle (or gone from the registry) is. A worker that
exits on its own is restarted with exponential backoff.

A warm pool (``autoscaling.warm_pool``, docs/adr/0128) is kept beside the serving
workers: ``size`` workers started with ``--parked``, loaded and warmed, claiming
nothing. A scale-up promotes them first (a Redis command, like drain) and starts
replacements behind them; a scale-down parks a serving worker instead of stopping
it when the pool is short (at max_replicas it is not refilled), or while a
replacement is still loading (that one is stopped: the pool gets a warm worker at
once). A parked worker that exits is replaced (after a backoff that grows while
replacements exit before parking), not restarted as capacity. The pool is never
refilled past what ``max_replicas`` could still promote, nor past what the free cores
could: a parked GPU worker holds its device share (its weights stay there); a parked
CPU worker is started with its threads but takes its cores only when promoted
(serving workers never outnumber the cores, as without a pool), so it is started only
where cores no one else counts on are free (docs/adr/0135). A promote or park
command that raised may have reached its worker: that worker's heartbeat then
decides whether it is counted (and holds cores) as serving or parked.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autoscaler.backends.base import Control, idlest_first
from autoscaler.backends.local_workers import EXITS_KEPT, LocalWorker, ModelState, sluice_command
from autoscaler.devices import CorePool, DevicePool
from sluice.backoff import Backoff
from sluice.config import REDIS_URL_ENV, SluiceConfig, WarmPoolConfig
from sluice.cores import THREADS_ENV, cores_per_worker, total_cores
from sluice.errors import SluiceError
from sluice.registry import PARK, PROMOTE, WorkerInfo

__all__ = ["EXITS_KEPT", "LocalBackend", "LocalWorker", "sluice_command"]

log = logging.getLogger("sluice.autoscaler")


class LocalBackend:
    name = "local"

    def __init__(
        self,
        cfg: SluiceConfig,
        config_path: Path,
        redis_url: str,
        *,
        command: list[str] | None = None,
        log_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        control: Control | None = None,
    ) -> None:
        self.cfg, self.config_path, self.redis_url = cfg, config_path, redis_url
        # Sends promote and park commands; without it no pool is kept.
        self.control = control
        self.pools = {
            m: c.autoscaling.warm_pool.sized(c.autoscaling.warm_pool.start_size)
            for m, c in cfg.models.items()
        }
        self.command = command or sluice_command()
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="sluice-workers-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.pool = DevicePool(list(cfg.autoscaler.devices))
        self.cores = CorePool(total_cores(cfg))
        self.models = {m: self._model_state() for m in cfg.models}
        self._seq = 0

    def _model_state(self) -> ModelState:
        a = self.cfg.autoscaler
        return ModelState(pool_backoff=Backoff(a.restart_backoff_s, a.restart_backoff_max_s))

    # -- what the loop asks ---------------------------------------------------
    def observe(self, model: str, workers: list[WorkerInfo]) -> None:
        st = self.models[model]
        st.info = {w.id: w for w in workers}
        if any(w.state == "ready" for w in workers):
            st.crashes = 0  # a worker got to ready: the backoff starts over
        if any(st.loaded_since_pool_exit(w) for w in workers):
            st.pool_backoff.reset()  # a replacement loaded: the pool's backoff starts over
        self._reconcile(model, st)
        ours = {w.id: w for w in st.workers}
        for info in workers:
            mine = ours.get(info.id)
            if mine is not None and info.ready_at and info.id not in st.cold_starts:
                st.cold_starts[info.id] = max(0.0, info.ready_at - mine.spawned_wall_s)
        while len(st.cold_starts) > 20:  # the recent ones are what the next spawn will see
            st.cold_starts.pop(next(iter(st.cold_starts)))

    def _reconcile(self, model: str, st: ModelState) -> None:
        """A worker whose promote or park command raised serves or parks as its own
        heartbeat says (the command may have reached it; issue 28): the backend's count
        and cores follow."""
        for w in st.workers:
            info = st.info.get(w.id)
            if not w.unsure or w.draining_since is not None or info is None:
                continue
            if w.parked and not info.parked and info.state in ("starting", "standby", "ready"):
                self._adopt_promoted(model, w)
            elif not w.parked and info.parked:
                self.cores.give(w.cores)
                w.cores, w.parked = 0, True
                log.warning("local: %s worker %s parked after all; counted as parked", model, w.id)

    def _adopt_promoted(self, model: str, w: LocalWorker) -> None:
        """Count a worker promoted after all as serving, with its cores; where they are
        no longer free, park it back rather than oversubscribe them."""
        try:
            self.cores.take(w.threads)
        except LookupError as e:
            log.warning(
                "local: %s worker %s was promoted after all, but %s: parking it back",
                model,
                w.id,
                e,
            )
            try:
                self._command(model, w, PARK)
            except SluiceError as err:  # still unsure: the next period tries again
                log.warning("local: parking %s worker %s back failed: %s", model, w.id, err)
            return
        w.cores, w.parked = w.threads, False
        log.warning("local: %s worker %s was promoted after all; counted as serving", model, w.id)

    def cold_start_s(self, model: str) -> float | None:
        """Median spawn-to-ready time of this backend's recent workers (process start,
        imports and model load included, which the worker's own clock misses)."""
        samples = sorted(self.models[model].cold_starts.values())
        return samples[len(samples) // 2] if samples else None

    def current(self, model: str) -> int:
        """Serving workers, running or starting (parked and draining ones excluded)."""
        st = self.models[model]
        live = sum(1 for w in st.workers if w.draining_since is None and not w.parked)
        return live + len(st.restarts_due)

    def parked(self, model: str) -> list[LocalWorker]:
        """The pool: parked workers, warm (standby) first, then those still loading."""
        st = self.models[model]
        pool = [w for w in st.workers if w.parked and w.draining_since is None]
        return sorted(pool, key=lambda w: 0 if self._standby(st, w) else 1)

    def keep_pool(self, model: str, pool: WarmPoolConfig) -> None:
        """The model's pool settings as of this period (they reload); refill or trim."""
        self.pools[model] = pool
        self._refill(model)
        self._trim(model)

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        if workers:
            self.observe(model, workers)
        cur = self.current(model)
        if desired > cur:
            n = desired - cur - self._promote(model, desired - cur)
            for _ in range(n):
                if not self._spawn(model):
                    break
            self._refill(model)
        elif desired < cur:
            self._shrink(model, cur - desired)

    def tick(self, now_s: float) -> None:
        now = self.clock()
        for model, st in self.models.items():
            self._reap(model, st, now)
            due = [t for t in st.restarts_due if t <= now]
            st.restarts_due = [t for t in st.restarts_due if t > now]
            for _ in due:
                self._spawn(model)
            self._refill(model)

    # -- the warm pool ------------------------------------------------------------
    def _pool_on(self, model: str) -> bool:
        return self.control is not None and self.pools[model].start_size > 0

    @staticmethod
    def _standby(st: ModelState, w: LocalWorker) -> bool:
        info = st.info.get(w.id)
        return info is not None and info.state == "standby"

    def _promote(self, model: str, n: int) -> int:
        """Promote up to n parked workers, warm ones first; how many were."""
        if self.control is None:
            return 0
        done = 0
        for w in self.parked(model)[:n]:
            # Taken before the command (so a promotion never oversubscribes), given
            # back when it fails: a failed command promoted nothing (issue 28).
            try:
                self.cores.take(w.threads)
            except LookupError as e:
                log.warning("local: not promoting %s worker %s: %s", model, w.id, e)
                break
            try:
                self._command(model, w, PROMOTE)
            except Exception:
                self.cores.give(w.threads)
                raise
            w.cores, w.parked = w.threads, False
            done += 1
            log.info("local: promoted %s worker %s", model, w.id)
        return done

    def _command(self, model: str, w: LocalWorker, command: str) -> None:
        """Send ``command`` to ``w``; one that raises may still have reached it, so
        the worker is marked unsure until a later command succeeds (see _reconcile)."""
        assert self.control is not None
        try:
            self.control(model, w.id, command)
        except Exception:
            w.unsure = True
            raise
        w.unsure = False

    def _pool_target(self, model: str, leaving: LocalWorker | None = None) -> int:
        """The pool's size, but no more than max_replicas could still promote, nor
        than the free cores could take in (``leaving``: a serving worker on its way
        out, its place and cores counted as free)."""
        if not self._pool_on(model):
            return 0
        serving = self.current(model) - (leaving is not None)
        room = self.cfg.models[model].autoscaling.max_replicas - serving
        fits = self._promotable(model, leaving.cores if leaving is not None else 0)
        return max(0, min(self.pools[model].start_size, room, fits))

    def pool_room(self, model: str) -> int | None:
        """Parked workers the free cores could promote (None: no core bound): the bound
        ``warm_pool.size: auto`` reports (ADR 0156); the pool's trim applies it anyway."""
        return None if self._threads(model) == 0 else self._promotable(model, 0)

    def _promotable(self, model: str, freed: int) -> int:
        """How many parked workers of ``model`` the free cores could promote: cores not
        held, not due to a pending restart and not counted on by another model's pool
        (a parked GPU worker holds its device share already; a synthetic one no cores)."""
        per = self._threads(model)
        if per == 0:
            return self.pools[model].start_size
        spoken = sum(
            len(st.restarts_due) * self._threads(m)
            + (sum(w.threads for w in self.parked(m)) if m != model else 0)
            for m, st in self.models.items()
        )
        return max(0, self.cores.total - self.cores.used + freed - spoken) // per

    def _threads(self, model: str) -> int:
        """Threads (and so cores, once serving) of one worker of ``model``."""
        if self.cfg.autoscaler.devices:
            return 0
        return cores_per_worker(self.cfg.models[model], self.cores.total)

    def _refill(self, model: str) -> None:
        st = self.models[model]
        if self.clock() < st.pool_refill_at:
            return  # a parked worker crashed: the pool backs off (issue 28)
        for _ in range(self._pool_target(model) - len(self.parked(model))):
            if not self._spawn(model, parked=True):
                break

    def _trim(self, model: str) -> None:
        """Stop parked workers beyond the pool's size, those still loading first."""
        extra = len(self.parked(model)) - self._pool_target(model)
        for w in list(reversed(self.parked(model)))[: max(0, extra)]:
            self._drain(w)

    def _park_instead(self, model: str, w: LocalWorker) -> bool:
        """Park ``w`` rather than stop it when the pool wants a worker: it is short of
        its target (which ``w`` leaving the serving ones may raise), or a refill is
        still loading (that refill is stopped instead: the pool gets a warm worker now).
        Called as ``w`` is taken out of the serving count."""
        if not self._pool_on(model) or not self.pools[model].park_on_scale_down:
            return False
        if self.control is None or w.proc.poll() is not None:
            return False
        st = self.models[model]
        pool = self.parked(model)
        loading = [p for p in pool if not self._standby(st, p)]
        short = len(pool) < self._pool_target(model, leaving=w)
        if not short and not loading:
            return False
        if not short:
            self._drain(loading[-1])
        self._command(model, w, PARK)
        w.parked = True
        self.cores.give(w.cores)  # a parked CPU worker holds no cores (see the module doc)
        w.cores = 0
        log.info("local: parking %s worker %s (scale-down)", model, w.id)
        return True

    def close(self, timeout_s: float | None = None) -> None:
        """Drain every worker and wait (then kill what is left)."""
        limit = self.cfg.autoscaler.drain_timeout_s if timeout_s is None else timeout_s
        for st in self.models.values():
            st.restarts_due.clear()
            for w in st.workers:
                self._drain(w)
        deadline = time.monotonic() + limit
        for st in self.models.values():
            for w in st.workers:
                try:
                    w.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("local: worker %s did not drain in %.0f s; killing", w.id, limit)
                    w.proc.kill()
                    w.proc.wait()
                self._release(w)
            st.workers.clear()

    # -- mechanics ----------------------------------------------------------------
    def _spawn(self, model: str, parked: bool = False) -> bool:
        mcfg = self.cfg.models[model]
        need = mcfg.autoscaling.gpu_memory_gb
        try:
            device = self.pool.place(need)
        except LookupError as e:
            log.warning("local: cannot start another %s worker: %s", model, e)
            return False
        threads = 0 if device is not None else cores_per_worker(mcfg, self.cores.total)
        cores = 0 if parked else threads  # a parked worker takes its cores when promoted
        try:
            self.cores.take(cores)
        except LookupError as e:
            self.pool.release(device, need)
            log.warning("local: not starting another %s worker: %s", model, e)
            return False
        self._seq += 1
        wid = f"local-{os.getpid()}-{self._seq}"
        args, env = self._worker_command(model, wid, parked, device, threads)
        try:
            out = (self.log_dir / f"{wid}.log").open("ab")
            proc = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as e:
            log.error("local: cannot start a %s worker: %s", model, e)
            self.pool.release(device, need)
            self.cores.give(cores)
            return False
        self.models[model].workers.append(
            LocalWorker(
                wid,
                model,
                proc,
                device,
                self.clock(),
                time.time(),
                out,
                cores=cores,
                parked=parked,
                threads=threads,
            )
        )
        where = device or f"cpu, {cores} core(s)"
        kind = "parked " if parked else ""
        log.info("local: started %s%s worker %s (pid %d, %s)", kind, model, wid, proc.pid, where)
        return True

    def _worker_command(
        self, model: str, wid: str, parked: bool, device: str | None, threads: int
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one worker process."""
        args = [
            *self.command,
            "worker",
            "--config",
            str(self.config_path),
            "--model",
            model,
            "--worker-id",
            wid,
        ]
        # The URL may hold a password: the environment, not argv (which `ps` shows).
        env = dict(os.environ, **{REDIS_URL_ENV: self.redis_url})
        if parked:
            args.append("--parked")
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
            args += ["--device", "cuda"]
        elif threads > 0:
            env[THREADS_ENV] = str(threads)  # a params.num_threads of its own still wins
        return args, env

    def _shrink(self, model: str, n: int) -> None:
        st = self.models[model]
        while n > 0 and st.restarts_due:  # not started yet: cheapest to drop
            st.restarts_due.pop()
            n -= 1
        ours = {w.id: w for w in st.workers if w.draining_since is None}
        # Not heartbeating yet means still loading: those go first, then the idlest.
        unseen = [w for wid, w in ours.items() if wid not in st.info]
        seen = [ours[i.id] for i in idlest_first(list(st.info.values())) if i.id in ours]
        for w in [w for w in unseen + seen if not w.parked][:n]:
            if not self._park_instead(model, w):
                self._drain(w)

    def _drain(self, w: LocalWorker) -> None:
        if w.draining_since is None and w.proc.poll() is None:
            w.draining_since = self.clock()
            log.info("local: draining %s worker %s (SIGTERM)", w.model, w.id)
            w.proc.send_signal(signal.SIGTERM)

    def _reap(self, model: str, st: ModelState, now: float) -> None:
        keep = []
        for w in st.workers:
            code = w.proc.poll()
            if code is None:
                self._maybe_kill(st, w, now)
                keep.append(w)
                continue
            self._release(w)
            st.exits.append((w.id, code, w.draining_since is not None))
            if w.draining_since is not None:
                log.info("local: %s worker %s drained (exit %d)", model, w.id, code)
                continue
            if w.parked:  # the pool's refill replaces it; it was never serving capacity
                self._parked_exit(st, w, code, now)
                continue
            st.crashes += 1
            backoff = min(
                self.cfg.autoscaler.restart_backoff_s * 2 ** (st.crashes - 1),
                self.cfg.autoscaler.restart_backoff_max_s,
            )
            st.restarts_due.append(now + backoff)
            log.warning(
                "local: %s worker %s exited with %d; restarting in %.1f s",
                model,
                w.id,
                code,
                backoff,
            )
        st.workers = keep

    def _parked_exit(self, st: ModelState, w: LocalWorker, code: int, now: float) -> None:
        """A parked worker that exits is replaced after a backoff, which grows while
        replacements exit before they reach standby: a crash loop must not cost a
        model load every period."""
        delay = st.pool_backoff.next_s()
        st.pool_exit_at = now
        st.pool_refill_at = max(st.pool_refill_at, now + delay)
        log.warning(
            "local: parked %s worker %s exited with %d; refilling the pool in %.1f s",
            w.model,
            w.id,
            code,
            delay,
        )

    def _maybe_kill(self, st: ModelState, w: LocalWorker, now: float) -> None:
        """A drain that outlived its timeout is killed only if the worker is not busy."""
        if w.draining_since is None:
            return
        if now - w.draining_since < self.cfg.autoscaler.drain_timeout_s:
            return
        info = st.info.get(w.id)
        if info is not None and info.busy:
            return
        log.warning(
            "local: worker %s still running %.0f s after drain; killing",
            w.id,
            now - w.draining_since,
        )
        w.proc.kill()

    def _release(self, w: LocalWorker) -> None:
        self.pool.release(w.device, self.cfg.models[w.model].autoscaling.gpu_memory_gb)
        self.cores.give(w.cores)
        w.cores = 0
        if w.log_file is not None:
            w.log_file.close()
            w.log_file = None

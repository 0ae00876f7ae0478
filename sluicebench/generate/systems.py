"""The served systems of ``sluice bench generate``, started and stopped one at a time.

- (a) ``sluice up`` on a config with the model's ``generate:`` section,
  ``admission: continuous``: one worker of one torch thread, the gateway, Redis;
- (b) the same with ``admission: whole_batch``;
- (c) Ray Serve ``@serve.batch`` (``ray_app``) in the venv ``RAY_VENV``;
- (d) vLLM on CPU, OpenAI's server from its own venv (``sluicebench.vllm_peer``).

A peer whose venv is missing is skipped with the reason and the command that makes
it. CPU seconds are read per process of each system's tree (psutil), by role.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from sluice.cores import THREADS_ENV
from sluice.local.redis_server import free_port
from sluicebench.ready import wait_ready as wait_http

REPO = Path(__file__).resolve().parents[2]
RAY_VENV = Path(os.environ.get("SLUICE_BENCH_RAY_VENV", "/work/venvs/ray"))
MODEL = "tiny"
START_TIMEOUT_S = 300.0


class Skipped(Exception):
    """A system that cannot run here; the message says why and what would fix it."""


ROLES = (  # (substring of the command line, role), first match wins
    ("redis-server", "redis"),
    ("gcs_server", "ray gcs"),
    ("raylet", "raylet"),
    ("ServeReplica", "ray replica"),
    ("ProxyActor", "ray proxy"),
    ("ServeController", "ray controller"),
    ("ray_app.py", "ray driver"),
    ("ray::", "ray other"),
    ("/ray/", "ray other"),
    ("EngineCore", "vllm engine"),
    ("vllm", "vllm api"),
    (" bulk", "bulk"),
    ("notifier", "notifier"),
    (" gateway", "gateway"),
    (" worker", "worker"),
    (" autoscaler", "autoscaler"),
    (" up", "sluice up"),
)


def role_of(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    return next((role for needle, role in ROLES if needle in text), "other")


def tree(root: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(root)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


@dataclass
class Cpu:
    """CPU seconds per process of a tree since ``mark``, grouped by role."""

    root: int
    start: dict[int, float] = field(default_factory=dict)

    def _read(self) -> dict[int, tuple[str, float]]:
        out = {}
        for p in tree(self.root):
            try:
                t = p.cpu_times()
                role = role_of(p.cmdline())
                if role == "other":  # its name says more (vLLM's engine core sets it)
                    role = f"other:{p.name()}"
                out[p.pid] = (role, t.user + t.system)
            except psutil.Error:
                continue
        return out

    def mark(self) -> None:
        self.start = {pid: cpu for pid, (_, cpu) in self._read().items()}

    def since(self) -> dict[str, dict[str, float]]:
        roles: dict[str, dict[str, float]] = {}
        for pid, (role, cpu) in self._read().items():
            r = roles.setdefault(role, {"procs": 0, "cpu_s": 0.0})
            r["procs"] += 1
            r["cpu_s"] = round(r["cpu_s"] + cpu - self.start.get(pid, 0.0), 2)
        return roles


@dataclass
class Running:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    prompt_as_ids: bool = False  # the Ray peer takes ids (it has no tokenizer)
    extra: dict[str, Any] = field(default_factory=dict)  # more of each request's body
    halt: Callable[[], None] | None = None  # the peer's own stop, when it has one

    def stop(self) -> None:
        """SIGINT (or the peer's own stop), then SIGKILL what is left of its tree."""
        procs = tree(self.proc.pid)
        if self.halt is not None:
            self.halt()
        elif self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in procs[1:]:
            try:
                p.kill()
            except psutil.Error:
                continue


def _spawn(
    name: str, argv: list[str], log_dir: Path, env: dict[str, str], url: str, **kw: Any
) -> Running:
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Running(name, proc, url, log, **kw)


def _env(threads: int) -> dict[str, str]:
    return os.environ | {
        "HF_HUB_OFFLINE": "1",
        THREADS_ENV: str(threads),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def wait_ready(run: Running, ok: Callable[[httpx.Response], bool], path: str) -> None:
    def exited() -> str | None:
        if run.proc.poll() is None:
            return None
        return f"{run.name} exited with {run.proc.returncode}: see {run.log}"

    if not wait_http(run.url + path, START_TIMEOUT_S, ok, every_s=0.5, exited=exited):
        raise RuntimeError(f"{run.name} did not come up in {START_TIMEOUT_S:.0f} s: see {run.log}")


def _ready_workers(resp: httpx.Response) -> bool:
    for m in resp.json().get("data", []):
        if m.get("name", m.get("id")) == MODEL:
            return int((m.get("workers") or {}).get("ready", 0)) > 0
    return False


def sluice_config(model_dir: Path, admission: str, slots: int, threads: int) -> str:
    """examples/generate.yaml's model on one worker, the benchmark's model and slots."""
    return f"""# written by sluice bench generate
models:
  {MODEL}:
    handler: causal-lm
    params: {{model: "{model_dir}", dtype: float32, threads: {threads}}}
    buckets: [64, 256, 1024]
    cost: {{method: words}}
    queue: {{result_ttl_s: 600}}
    batching: {{lease_s: 10, max_attempts: 3}}
    generate:
      slots: {slots}
      admission: {admission}
      max_seq_tokens: 1024
      prefill_tokens_per_step: 256
      default_max_tokens: 256
    autoscaling: {{min_replicas: 1, max_replicas: 1}}
gateway: {{host: 127.0.0.1, port: 8000}}
"""


def start_sluice(
    name: str, model_dir: Path, admission: str, slots: int, threads: int, log_dir: Path
) -> Running:
    config = log_dir / f"{name}.yaml"
    config.write_text(sluice_config(model_dir, admission, slots, threads))
    port = free_port()
    argv = [sys.executable, "-m", "sluice", "up", "--config", str(config), "--port", str(port)]
    run = _spawn(name, argv, log_dir, _env(threads), f"http://127.0.0.1:{port}")
    _ready(run, lambda: wait_ready(run, _ready_workers, "/v1/models"))
    return run


def start_ray(model_dir: Path, slots: int, threads: int, log_dir: Path) -> Running:
    python = RAY_VENV / "bin" / "python"
    if not python.exists():
        raise Skipped(f"no Ray venv at {RAY_VENV} (make bench-peers makes it)")
    port = free_port()
    app = Path(__file__).with_name("ray_app.py")
    argv = [str(python), str(app), str(model_dir), str(port), str(slots), str(threads)]
    env = {k: v for k, v in _env(threads).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    run = _spawn("ray", argv, log_dir, env, f"http://127.0.0.1:{port}", prompt_as_ids=True)
    _ready(run, lambda: wait_ready(run, lambda r: r.status_code == 200, "/healthz"))
    return run


def start_vllm(model_dir: Path, slots: int, threads: int, log_dir: Path) -> Running:
    """vLLM's OpenAI server from its venv (g7's ``sluicebench.vllm_peer``: the venv in
    $SLUICE_VLLM_VENV, else .venv-vllm; ``make vllm-venv`` makes it)."""
    from sluicebench.vllm_peer import PeerUnavailable
    from sluicebench.vllm_peer import start_vllm as start_peer

    try:
        server = start_peer(
            model_dir,
            free_port(),
            threads,
            slots=slots,
            max_model_len=1024,
            log_path=log_dir / "vllm.log",
            timeout_s=START_TIMEOUT_S,
        )
    except PeerUnavailable as e:
        raise Skipped(e.reason) from e
    # ignore_eos: vLLM's own switch for what the workload asks (exactly max_tokens).
    run = Running(
        "vllm",
        server.process,
        server.url,
        server.log_path,
        extra={"ignore_eos": True},
        halt=server.stop,
    )
    _ready(run, lambda: None)
    return run


def _ready(run: Running, wait: Callable[[], None]) -> None:
    try:
        wait()
        probe(run)
    except BaseException:
        run.stop()
        raise


def probe(run: Running) -> None:
    """Until one short completion answers 200: a server can say it is up (its
    worker registered) a moment before it serves."""
    body = {
        "model": MODEL,
        "prompt": [20, 21, 22] if run.prompt_as_ids else "probe",
        "max_tokens": 1,
        "temperature": 0.0,
    }
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if run.proc.poll() is not None:
            raise RuntimeError(f"{run.name} exited with {run.proc.returncode}: see {run.log}")
        try:
            resp = httpx.post(run.url + "/v1/completions", json=body, timeout=60)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.5)
    raise RuntimeError(f"{run.name} never answered a completion ({last}): see {run.log}")


def start(name: str, model_dir: Path, slots: int, threads: int, log_dir: Path) -> Running:
    """Start system ``name`` (a-d); Skipped when it cannot run here."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if name in ("a", "b"):
        admission = "continuous" if name == "a" else "whole_batch"
        return start_sluice(name, model_dir, admission, slots, threads, log_dir)
    if name == "c":
        return start_ray(model_dir, slots, threads, log_dir)
    if name == "d":
        return start_vllm(model_dir, slots, threads, log_dir)
    raise ValueError(f"no served system {name!r}")


def describe(name: str) -> dict[str, Any]:
    return {
        "a": {"label": "sluice continuous", "cores": "worker 1 thread; gateway, redis"},
        "b": {"label": "sluice whole-batch", "cores": "worker 1 thread; gateway, redis"},
        "c": {"label": "Ray Serve @serve.batch", "cores": "replica 1 thread; ray processes"},
        "d": {"label": "vLLM CPU", "cores": "engine 1 OMP thread; API server"},
        "e": {"label": "engine in process", "cores": "1 process, 1 thread"},
    }[name]

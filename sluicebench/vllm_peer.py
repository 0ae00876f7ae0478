"""Peer (d) of ``sluice bench generate``: vLLM's OpenAI server on CPU (issue 30).

Owns: starting vLLM's OpenAI server (``vllm.entrypoints.launchers.api_server.entry``,
what ``vllm serve`` runs; 0.32 deprecates ``vllm.entrypoints.openai.api_server``)
from the vLLM venv (a venv of its own: vllm-cpu pins its torch and transformers,
docs/benchmarks/vllm-cpu.md) on a loopback port with the benchmark's model
directory, waiting until it serves ``/v1/models``, and stopping it
(``sluicebench.vllm_measure`` measures it). ``PeerUnavailable`` says why the peer cannot run (no
venv, the server died at start), so the benchmark can report it and go on.

Threads: ``threads`` is the engine core's OpenMP threads (``OMP_NUM_THREADS``,
not pinned: ``VLLM_CPU_OMP_THREADS_BIND=nobind``). The API server is a second
process (HTTP, tokenization, detokenization) beside the engine core, as in any
vLLM deployment; the benchmark counts the CPU of both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
# The venv `make vllm-venv` builds; SLUICE_VLLM_VENV points elsewhere.
DEFAULT_VENV = ROOT / ".venv-vllm"
START_TIMEOUT_S = 300.0  # an import of ~40 s and an engine start of ~20 s on a busy 2-core host


class PeerUnavailable(RuntimeError):
    """The vLLM peer cannot run here; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class VLLMServer:
    """A running vLLM OpenAI server; ``model`` is the name it serves."""

    url: str
    model: str
    process: subprocess.Popen[bytes]
    log_path: Path
    pids: list[int] = field(default_factory=list)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group (the API server and its engine core
        process), SIGKILL what is left after ``timeout_s``."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout_s)
        _signal_group(self.process.pid, signal.SIGKILL)  # an engine core left behind

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def vllm_python(venv: str | Path | None = None) -> Path:
    """The vLLM venv's python, or PeerUnavailable saying how to make one."""
    root = Path(venv or os.environ.get("SLUICE_VLLM_VENV") or DEFAULT_VENV)
    python = root / "bin" / "python"
    if not python.exists():
        raise PeerUnavailable(
            f"no vLLM venv at {root} (build one with `make vllm-venv VLLM_VENV={root}` "
            "or set SLUICE_VLLM_VENV; docs/benchmarks/vllm-cpu.md)"
        )
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.stdout.strip() != "True":
        raise PeerUnavailable(f"{python} has no vllm installed: {probe.stderr.strip()[-300:]}")
    return python


def server_command(
    python: Path, model_dir: str, port: int, slots: int, max_model_len: int
) -> list[str]:
    """The api_server's argv: float32, eager (no minute-long torch.compile at start),
    chunked prefill off (the seeded-sampling crash on CPU: workers/generate/vllm_engine.py)."""
    return [
        str(python), "-m", "vllm.entrypoints.launchers.api_server.entry",
        "--model", model_dir,
        "--served-model-name", "tiny",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(slots),
        "--max-num-batched-tokens", str(max(max_model_len, slots)),
        "--no-enable-chunked-prefill",
        "--enforce-eager",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip


def server_env(threads: int) -> dict[str, str]:
    return os.environ | {
        "OMP_NUM_THREADS": str(threads),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONPATH": "",  # the vLLM venv's own packages, not a Sluice checkout's
    }


def start_vllm(
    model_dir: str | Path,
    port: int,
    threads: int,
    *,
    slots: int = 64,
    max_model_len: int = 1024,
    venv: str | Path | None = None,
    log_path: str | Path | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> VLLMServer:
    """Start vLLM's OpenAI server on 127.0.0.1:``port`` serving ``model_dir`` as
    model ``tiny``; returns once ``/v1/models`` answers. PeerUnavailable when the
    venv is missing or the server exits (or hangs) before it serves."""
    python = vllm_python(venv)
    log = Path(log_path or f"/tmp/sluice-vllm-{port}.log")
    cmd = server_command(python, str(model_dir), port, slots, max_model_len)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(threads),
            start_new_session=True,
        )
    server = VLLMServer(url=f"http://127.0.0.1:{port}", model="tiny", process=proc, log_path=log)
    try:
        _wait_ready(server, timeout_s)
    except PeerUnavailable:
        server.stop()
        raise
    return server


def _wait_ready(server: VLLMServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                code = server.process.returncode
                raise PeerUnavailable(f"vLLM exited with {code} at start: {_tail(server.log_path)}")
            try:
                if client.get(f"{server.url}/v1/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)  # polling a child process's port: no event to wait on
    raise PeerUnavailable(f"vLLM did not serve within {timeout_s:.0f} s: {_tail(server.log_path)}")


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"(no log: {e})"

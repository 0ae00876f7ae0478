#!/usr/bin/env python3
"""Container health and readiness probes for Sluice images (stdlib only).

    sluice-probe url URL            exit 0 if URL answers 2xx (gateway /healthz, /readyz)
    sluice-probe worker-ready PORT  exit 0 if the worker on PORT reports state "ready"
                                    (or "standby": a warm-pool worker, loaded)
    sluice-probe drain [--parent P] send SIGTERM (the drain) to every `sluice worker`
                                    process in this PID namespace (or child of P)
                                    and return at once: a worker's preStop hook

A worker has no readiness endpoint of its own: its Prometheus port serves the
same text on every path. Its ``sluice_worker_state{state="ready"}`` gauge is 1
only after the model is loaded and warmed up, and drops to 0 when it drains or
quarantines, so that gauge is the readiness signal (tests/*/deploy runs this script
against a real worker metrics server). A parked warm-pool worker (``standby``) is
loaded and healthy too: ready for a rollout, promoted by the autoscaler.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 3.0
READY_METRIC = "sluice_worker_state"
READY_STATES = ("ready", "standby")
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError) as e:
        print(f"sluice-probe: {url}: {e}", file=sys.stderr)
        return 0, ""


def worker_ready(metrics_text: str) -> bool:
    """True if some sample of the state gauge says a ready state with value 1."""
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m["name"] != READY_METRIC:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        if labels.get("state") in READY_STATES and float(m["value"]) == 1.0:
            return True
    return False


def is_sluice_worker(argv: list[str]) -> bool:
    """``.../sluice worker ...``, ``python -m sluice worker``, ``-c "..sluice.cli.." worker``."""
    for i, arg in enumerate(argv[:-1]):
        if arg.rsplit("/", 1)[-1] == "sluice" or "sluice.cli" in arg:
            return argv[i + 1] == "worker"
    return False


def _ppid(proc: Path) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces or parens.
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


def worker_pids(proc_root: Path = Path("/proc"), parent: int | None = None) -> list[int]:
    pids = []
    for proc in proc_root.iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
            if parent is not None and _ppid(proc) != parent:
                continue
        except OSError:
            continue  # the process exited meanwhile
        if is_sluice_worker([a for a in argv if a]):
            pids.append(int(proc.name))
    return sorted(pids)


def drain(parent: int | None) -> int:
    """SIGTERM (the worker's drain) to every worker process; never waits.

    Signalling the worker itself, not PID 1, drains it even when a command
    override wraps sluice in a shell that does not forward SIGTERM. Returning at
    once keeps the kubelet from reporting a failed hook when the container exits.
    """
    pids = worker_pids(parent=parent)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError as e:
            print(f"sluice-probe: drain {pid}: {e}", file=sys.stderr)
    print(f"sluice-probe: drain sent to {len(pids)} worker(s): {pids}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "url":
        status, _ = fetch(argv[1])
        return 0 if 200 <= status < 300 else 1
    if len(argv) == 2 and argv[0] == "worker-ready":
        status, text = fetch(f"http://127.0.0.1:{int(argv[1])}/metrics")
        if status == 200 and worker_ready(text):
            return 0
        print("sluice-probe: worker not ready (loading, draining or quarantined)", file=sys.stderr)
        return 1
    if argv[:1] == ["drain"]:
        rest = argv[1:]
        if rest and (len(rest) != 2 or rest[0] != "--parent"):
            print(__doc__, file=sys.stderr)
            return 2
        return drain(int(rest[1]) if rest else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Container health and readiness probes for Sluice images (stdlib only).

    sluice-probe url URL            exit 0 if URL answers 2xx (gateway /healthz, /readyz)
    sluice-probe worker-ready PORT  exit 0 if the worker on PORT reports state "ready"

A worker has no readiness endpoint of its own: its Prometheus port serves the
same text on every path. Its ``sluice_worker_state{state="ready"}`` gauge is 1
only after the model is loaded and warmed up on every bucket's largest shape,
and drops to 0 when it drains or quarantines, so that gauge is the readiness
signal (tests/deploy runs this script against a real worker metrics server).
"""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 3.0
READY_METRIC = "sluice_worker_state"
READY_STATE = "ready"
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
    """True if some sample of the state gauge says state="ready" with value 1."""
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m["name"] != READY_METRIC:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        if labels.get("state") == READY_STATE and float(m["value"]) == 1.0:
            return True
    return False


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
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

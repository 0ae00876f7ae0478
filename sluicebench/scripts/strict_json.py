"""What strict JSON parsing costs the gateway: ``json.loads`` vs ``gateway.strict_json.loads``.

sluice bench strict-json [--repeat 5] [--json PATH]

Same bodies, same process, interleaved runs; the table gives microseconds per
parse (best of --repeat) and the ratio. The refused bodies show how fast a
hostile body is turned away (json.loads raises or, for NaN, accepts).
"""

from __future__ import annotations

import argparse
import json
import timeit
from pathlib import Path
from typing import Any

from gateway.strict_json import loads

WORDS = "the quick brown fox jumps over the lazy dog "
BODIES: dict[str, bytes] = {
    "submit (hot path)": b'{"input": "the quick brown fox jumps over the lazy dog"}',
    "submit, all fields": json.dumps(
        {
            "input": WORDS * 3,
            "priority": "high",
            "deadline_ms": 5000,
            "metadata": {"user": "a", "trace": "0af7651916cd43dd8448eb211c80319c", "n": 1.5},
        }
    ).encode(),
    "batch of 256 texts": json.dumps({"inputs": [WORDS * 2] * 256}).encode(),
    "1 MB text": json.dumps({"input": WORDS * 23_000}).encode(),
    "metadata, 2,000 small objects": json.dumps(
        {"input": "x", "metadata": {"rows": [{"a": i, "b": [i, i]} for i in range(2000)]}}
    ).encode(),
    "worst: 1 MB of empty arrays": b'{"input": "x", "metadata": {"a": ['
    + b"[]," * 330_000
    + b"[]]}}",
    "worst: 1 MB of small objects": json.dumps(
        {"input": "x", "metadata": {"rows": [{"a": i, "b": 1.5} for i in range(60_000)]}}
    ).encode(),
    "worst: 1 MB string of brackets": json.dumps({"input": "[{" * 500_000}).encode(),
    "refused: NaN": b'{"input": NaN}',
    "refused: 100,000 nested arrays": b"[" * 100_000 + b"]" * 100_000,
    "refused: 4,000-digit integer": b'{"input": ' + b"9" * 4000 + b"}",
}


def _per_call_us(fn: Any, body: bytes, repeat: int) -> float:
    def once() -> None:
        try:
            fn(body)
        except (ValueError, RecursionError):
            pass

    timer = timeit.Timer(once)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number * 1e6


def run(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, body in BODIES.items():
        base = _per_call_us(json.loads, body, repeat)
        strict = _per_call_us(loads, body, repeat)
        rows.append(
            {
                "body": name,
                "bytes": len(body),
                "json_loads_us": round(base, 2),
                "strict_us": round(strict, 2),
                "ratio": round(strict / base, 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="sluice bench strict-json", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = run(args.repeat)
    print(f"{'body':32} {'bytes':>9} {'json.loads us':>14} {'strict us':>10} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['body']:32} {r['bytes']:>9} {r['json_loads_us']:>14.2f} "
            f"{r['strict_us']:>10.2f} {r['ratio']:>6.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

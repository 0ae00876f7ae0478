"""A short closed-loop measure of vLLM's OpenAI server (peer (d), issue 30).

Owns: issue 30's workload (prompts of 16-256 token ids, ``max_tokens`` 16/64/256
at 50/30/20%, greedy, ``ignore_eos`` so every request produces its
``max_tokens``) sent as streamed ``/v1/completions`` by ``concurrency`` clients,
and the figures: output tokens/s, time to first token and inter-token gaps
(p50/p99), CPU seconds per server process. The benchmark proper
(``sluice bench generate``) lives elsewhere; this is the check that peer (d) runs
and what it gives on this model.

    python -m sluicebench.vllm_measure --model-dir DIR --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import psutil

from sluicebench.vllm_peer import VLLMServer, start_vllm

MAX_TOKENS = (16, 64, 256)
MAX_TOKENS_WEIGHTS = (0.5, 0.3, 0.2)


@dataclass(frozen=True, slots=True)
class Request:
    prompt: list[int]
    max_tokens: int


@dataclass
class Figures:
    requests: int
    concurrency: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    cpu_s: dict[str, float]


def workload(n: int, vocab: int, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)
    return [
        Request(
            prompt=[rng.randrange(vocab - 1) for _ in range(rng.randint(16, 256))],
            max_tokens=rng.choices(MAX_TOKENS, MAX_TOKENS_WEIGHTS)[0],
        )
        for _ in range(n)
    ]


async def _one(
    client: httpx.AsyncClient, url: str, model: str, req: Request
) -> tuple[float, list[float], int]:
    """One streamed completion: (time to first token, gaps between tokens, tokens)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    stamps: list[float] = []
    tokens = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            if chunk.get("choices"):
                stamps.append(time.perf_counter())
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return (stamps[0] - start if stamps else float("nan")), gaps, tokens


async def closed_loop(
    url: str, model: str, reqs: list[Request], concurrency: int
) -> tuple[float, list[tuple[float, list[float], int]]]:
    queue = list(reversed(reqs))
    results: list[tuple[float, list[float], int]] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:

        async def worker() -> None:
            while queue:
                results.append(await _one(client, url, model, queue.pop()))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start, results


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000.0


def _cpu(server: VLLMServer) -> dict[str, float]:
    """CPU seconds (user + system) of the server and each of its children, by pid."""
    root = psutil.Process(server.process.pid)
    out: dict[str, float] = {}
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[f"{p.pid}:{p.name()}"] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def measure(server: VLLMServer, reqs: list[Request], concurrency: int) -> Figures:
    before = _cpu(server)
    wall, results = asyncio.run(closed_loop(server.url, server.model, reqs, concurrency))
    after = _cpu(server)
    tokens = sum(r[2] for r in results)
    gaps = [g for r in results for g in r[1]]
    return Figures(
        requests=len(reqs),
        concurrency=concurrency,
        output_tokens=tokens,
        wall_s=round(wall, 2),
        tokens_per_s=round(tokens / wall, 1),
        ttft_p50_ms=round(_pct([r[0] for r in results], 0.5), 1),
        ttft_p99_ms=round(_pct([r[0] for r in results], 0.99), 1),
        itl_p50_ms=round(_pct(gaps, 0.5), 2),
        itl_p99_ms=round(_pct(gaps, 0.99), 2),
        cpu_s={k: round(after[k] - before.get(k, 0.0), 1) for k in after},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model-dir", required=True, help="a Hugging Face directory (the tiny GPT-2)")
    ap.add_argument("--threads", type=int, default=1, help="the engine core's threads")
    ap.add_argument("--port", type=int, default=8391)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=8, help="requests sent first, not counted")
    args = ap.parse_args(argv)
    with start_vllm(args.model_dir, args.port, args.threads, slots=args.concurrency) as server:
        measure(
            server, workload(args.warmup, args.vocab, seed=1), min(args.warmup, args.concurrency)
        )
        figures = measure(server, workload(args.requests, args.vocab), args.concurrency)
    print(json.dumps(asdict(figures) | {"threads": args.threads}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

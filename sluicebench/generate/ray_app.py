"""System (c) of ``sluice bench generate``: Ray Serve's ``@serve.batch`` over an async
generator, the way Ray's docs stream from a batched model.

Run by file path in its own venv (``make bench-peers`` makes /work/venvs/ray), so it
imports nothing from Sluice: ``python ray_app.py MODEL_DIR PORT MAX_BATCH THREADS``.
One replica, one batch at a time (Ray's default ``max_concurrent_batches``): the
batch handler left-pads the batch's prompts, prefills them together, then decodes
step by step with the KV cache and yields each request's token every step until
the longest member has its ``max_tokens`` (a finished member gets Ray's
``StopIteration`` and its slot idles: Ray never adds a request to a running
batch, ray#36098). Greedy, no end-of-sequence stop, as the workload asks. The
forward passes run in a thread so the replica's event loop keeps streaming.
Served at ``POST /v1/completions`` (OpenAI's streaming chunks with ``token_ids``
and a final ``usage``) behind Serve's FastAPI ingress; ``GET /healthz``.
"""

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from typing import Any

import ray
import torch
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from ray import serve
from transformers import AutoModelForCausalLM

api = FastAPI()


class Batch:
    """One batch's decoding state: left-padded, positions per row, a KV cache."""

    def __init__(self, model: Any, prompts: list[list[int]]) -> None:
        self.model = model
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        self.mask = mask
        self.positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.ids = ids
        self.past: Any = None

    @torch.inference_mode()
    def step(self) -> list[int]:
        out = self.model(
            input_ids=self.ids,
            attention_mask=self.mask,
            position_ids=self.positions,
            past_key_values=self.past,
            use_cache=True,
        )
        self.past = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(-1)
        self.ids = nxt[:, None]
        self.positions = self.positions[:, -1:] + 1
        self.mask = torch.cat([self.mask, torch.ones_like(self.ids)], dim=-1)
        return [int(t) for t in nxt]


def _chunk(token: int | None, usage: int | None = None) -> bytes:
    body: dict[str, Any] = {"object": "text_completion", "choices": []}
    if token is not None:
        body["choices"] = [{"index": 0, "text": str(token), "token_ids": [token]}]
    if usage is not None:
        body["usage"] = {"completion_tokens": usage}
    return f"data: {json.dumps(body)}\n\n".encode()


@serve.deployment(max_ongoing_requests=1024)
@serve.ingress(api)
class Completions:
    def __init__(self, model_dir: str, max_batch: int, threads: int) -> None:
        torch.set_num_threads(threads)
        self.generate.set_max_batch_size(max_batch)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()

    @api.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> StreamingResponse:
        body = await request.json()
        tokens = self.generate((list(body["prompt"]), int(body["max_tokens"])))

        async def sse() -> AsyncGenerator[bytes, None]:
            n = 0
            async for token in tokens:
                n += 1
                yield _chunk(token)
            yield _chunk(None, usage=n)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def generate(self, reqs: list[tuple[list[int], int]]) -> AsyncGenerator[list[Any], None]:
        batch = Batch(self.model, [prompt for prompt, _ in reqs])
        longest = max(n for _, n in reqs)
        for i in range(longest):
            tokens = await asyncio.to_thread(batch.step)
            yield [t if i < n else StopIteration for t, (_, n) in zip(tokens, reqs, strict=True)]


def main(model_dir: str, port: int, max_batch: int, threads: int) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = Completions.bind(model_dir, max_batch, threads)  # type: ignore[attr-defined]
    serve.run(app, name="generate", route_prefix="/")
    print("ready", flush=True)
    while True:  # the benchmark stops this process with SIGINT
        asyncio.run(asyncio.sleep(3600))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))

"""The hand-rolled alternative: FastAPI + an asyncio micro-batcher in one process.

What a team writes instead of a queue: requests wait on a future, one task
takes whatever is queued (up to ``MAX_BATCH`` inputs, waiting at most
``MAX_WAIT_MS`` for more once one arrived), runs
``SentenceTransformer.encode`` on it in a thread, and resolves the futures.
``sluice bench e2e`` serves it with uvicorn as system (d); it uses the same
bundled all-MiniLM-L6-v2 and the same torch threads as the stack.

Run: ``python -m sluicebench.microbatcher PORT`` (threads from $SLUICE_NUM_THREADS).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel

MAX_BATCH = 32
MAX_WAIT_MS = 2.0


class Body(BaseModel):
    input: str


Pending = asyncio.Queue[tuple[str, "asyncio.Future[list[float]]"]]


async def batcher(queue: Pending, encode: Any) -> None:
    """Take what is queued (waiting up to MAX_WAIT_MS for more once one arrived),
    encode it in a thread, resolve the futures; forever."""
    loop = asyncio.get_running_loop()
    while True:
        batch = [await queue.get()]
        until = loop.time() + MAX_WAIT_MS / 1000
        while len(batch) < MAX_BATCH:
            if not queue.empty():  # what is queued already is taken whatever the clock
                batch.append(queue.get_nowait())
                continue
            try:
                batch.append(await asyncio.wait_for(queue.get(), until - loop.time()))
            except TimeoutError:
                break
        try:
            vectors = await asyncio.to_thread(encode, [t for t, _ in batch])
        except Exception as e:  # one bad batch fails its requests, not the server
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            continue
        for (_, fut), vector in zip(batch, vectors, strict=True):
            if not fut.done():
                fut.set_result(vector)


def build_app() -> Any:
    import torch
    from fastapi import FastAPI
    from sentence_transformers import SentenceTransformer

    from sluice.cores import THREADS_ENV
    from sluice.cost import bundled_model_dir

    threads = int(os.environ.get(THREADS_ENV, "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    model = SentenceTransformer(str(bundled_model_dir()), device="cpu")
    model.encode(["warm up"] * MAX_BATCH)
    queue: Pending = asyncio.Queue()

    def encode(texts: list[str]) -> list[list[float]]:
        vectors = model.encode(texts, batch_size=MAX_BATCH, normalize_embeddings=True)
        return [v.tolist() for v in vectors]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(batcher(queue, encode))
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/embed")
    async def embed(body: Body) -> dict[str, Any]:
        fut: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        await queue.put((body.input, fut))
        return {"embedding": await fut}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    import uvicorn

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    port = int(sys.argv[1])
    uvicorn.run(build_app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()

"""The gateway in-process on fakeredis with a generative model ``g`` (a fake prompt
codec: one token per character) and a plain model ``m``; a fake worker that claims
a job, writes its stream entries the way the step script lays them out, and
completes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import fakeredis
import httpx
import pytest
import pytest_asyncio
from fakeredis import aioredis as fake_aioredis

from gateway.app import create_app
from gateway.generate_service import Codecs
from gateway.state import GatewayState
from sluice import keys
from sluice.config import SluiceConfig
from sluice.generate.params import GenerateInput, GenerateResult
from sluice.jobs import Outcome
from sluice.queue import AsyncQueueClient
from sluice.records import StreamEvent, StreamField
from tests.kit.generate_gateway import MAX_SEQ, CharCodec, generative_config
from tests.waits import async_wait_until


@dataclass
class Gen:
    client: httpx.AsyncClient
    app: Any
    state: GatewayState
    queue: AsyncQueueClient  # the worker's client on the same server
    redis: Any

    async def xadd(self, job_id: str, kind: StreamEvent, attempt: int = 1, **f: Any) -> str:
        fields = {StreamField.TYPE.value: kind.value, StreamField.ATTEMPT.value: str(attempt)}
        fields.update({StreamField(k).value: str(v) for k, v in f.items()})
        return str(await self.redis.xadd(keys.stream_key("g", job_id), fields))

    async def tokens(self, job_id: str, index: int, text: str, attempt: int = 1) -> str:
        ids = json.dumps([ord(c) for c in text])
        return await self.xadd(job_id, StreamEvent.TOKENS, attempt, i=index, ids=ids, x=text)

    max_seq: int = MAX_SEQ

    async def claim_next(self) -> tuple[str, GenerateInput]:
        """The next queued job of ``g``, claimed by worker w1."""

        async def one() -> Any:
            batch = await self.queue.claim("g", "w1", max_batch=1)
            return batch.jobs[0] if batch.jobs else None

        job = await async_wait_until(one, what="a queued job")
        return job.id, GenerateInput.from_dict(job.input)

    async def claim(self, job_id: str) -> GenerateInput:
        claimed, gi = await self.claim_next()
        assert claimed == job_id
        return gi

    async def finish(self, job_id: str, text: str, attempt: int = 1, prompt: int = 3) -> str:
        result = GenerateResult(text, tuple(ord(c) for c in text), "stop", prompt, attempt)
        eid = await self.xadd(job_id, StreamEvent.END, attempt, r=json.dumps(result.to_dict()))
        await self.queue.complete("g", [Outcome.ok(job_id, result.to_dict())], "w1")
        return eid

    async def serve(self, pieces: list[str], *, restart_after: int = 0) -> str:
        """Claim the next job and stream ``pieces`` one token each (``restart_after``:
        attempt 1 streams that many, then attempt 2 all of them); its id."""
        job_id, gi = await self.claim_next()
        attempt = 1
        await self.xadd(job_id, StreamEvent.START, attempt)
        # A piece's ids are its chars (as the result's), so its index (the output
        # offset of its first id) is the chars before it.
        at = [sum(map(len, pieces[:i])) for i in range(len(pieces))]
        if restart_after:
            for i, piece in enumerate(pieces[:restart_after]):
                await self.tokens(job_id, at[i], piece, attempt)
            attempt = 2
            await self.xadd(job_id, StreamEvent.RESTART, attempt)
        for i, piece in enumerate(pieces):
            await self.tokens(job_id, at[i], piece, attempt)
        await self.finish(job_id, "".join(pieces), attempt, len(gi.prompt_ids))
        return job_id


@asynccontextmanager
async def open_gen(cfg: SluiceConfig | None = None) -> AsyncIterator[Gen]:
    """The gateway of ``cfg`` (default: generative_config()) on a fresh fakeredis."""
    server = fakeredis.FakeServer()
    r = fake_aioredis.FakeRedis(server=server, decode_responses=True)
    side = fake_aioredis.FakeRedis(server=server, decode_responses=True)
    cfg = cfg or generative_config()
    app = create_app(cfg, redis=r)
    app.state.gateway.codecs = Codecs(lambda _cfg: CharCodec())
    transport = httpx.ASGITransport(app=app)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                yield Gen(c, app, app.state.gateway, AsyncQueueClient(side, dict(cfg.models)), side)
    finally:
        await side.aclose()


@pytest_asyncio.fixture(loop_scope="function")
async def gen() -> AsyncIterator[Gen]:
    async with open_gen() as g:
        yield g


@pytest.fixture
def make_gen() -> Callable[..., AbstractAsyncContextManager[Gen]]:
    """``async with make_gen(auth=None, **gateway) as g``: the gateway of
    ``generative_config(auth, **gateway)`` (API keys, other gateway settings)."""
    return lambda auth=None, **gateway: open_gen(generative_config(auth, **gateway))

"""Every generative model's prompt codec loads at gateway start. One that does not
(tokenizer files missing, a template that does not compile) makes /readyz not
ready with the reason, and that model's submits answer 503: never a 500, and the
other models are served."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import pytest
import pytest_asyncio
from fakeredis import aioredis as fake_aioredis

from gateway.app import create_app
from gateway.generate_service import Codecs, load_codec
from sluice.config import ModelConfig
from tests.kit.generate_gateway import CharCodec, generative_config

pytestmark = pytest.mark.asyncio(loop_scope="function")


async def started(codecs: Codecs, cfg: Any = None) -> AsyncIterator[httpx.AsyncClient]:
    r = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    app = create_app(cfg or generative_config(), redis=r)
    app.state.gateway.codecs = codecs
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            yield c


def missing(cfg: ModelConfig) -> Any:
    raise FileNotFoundError("/models/g: no tokenizer.json (a fast tokenizer is needed)")


@pytest_asyncio.fixture(loop_scope="function")
async def broken() -> AsyncIterator[httpx.AsyncClient]:
    async for c in started(Codecs(missing)):
        yield c


async def test_codecs_load_at_start_once_not_on_the_first_request() -> None:
    loaded: list[str] = []

    def loader(cfg: ModelConfig) -> Any:
        loaded.append(str(cfg.params["model"]))
        return CharCodec()

    async for c in started(Codecs(loader)):
        assert loaded == ["tiny:2x64"]
        ready = await c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["models_unavailable"] == {}
        resp = await c.post("/v1/models/g/jobs", json={"input": {"prompt": "hi"}})
        assert resp.status_code == 202
        assert loaded == ["tiny:2x64"]


async def test_readyz_names_the_model_whose_codec_did_not_load(broken: httpx.AsyncClient) -> None:
    ready = await broken.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert "no tokenizer.json" in body["models_unavailable"]["g"]
    assert "model 'g'" in body["error"]["message"] and body["redis"] is True


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/models/g/jobs", {"input": {"prompt": "hi"}}),
        ("/v1/models/g/predict", {"input": {"prompt": "hi"}}),
        ("/v1/completions", {"model": "g", "prompt": "hi"}),
        ("/v1/chat/completions", {"model": "g", "messages": [{"role": "user", "content": "x"}]}),
        ("/v1/completions", {"model": "g", "prompt": "hi", "stream": True}),
    ],
)
async def test_its_submits_are_503_naming_the_cause(
    broken: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    resp = await broken.post(path, json=body)
    assert resp.status_code == 503, resp.text
    assert "Retry-After" in resp.headers
    msg = resp.json()["error"]["message"]
    assert "model 'g'" in msg and "no tokenizer.json" in msg


async def test_the_other_models_are_still_served(broken: httpx.AsyncClient) -> None:
    resp = await broken.post("/v1/models/m/jobs", json={"input": "hello"})
    assert resp.status_code == 202, resp.text


async def test_a_model_directory_without_tokenizer_files_is_reported(tmp_path: Path) -> None:
    cfg = generative_config()
    g = cfg.models["g"].model_copy(update={"params": {"model": str(tmp_path)}})
    cfg = cfg.model_copy(update={"models": {**cfg.models, "g": g}})
    async for c in started(Codecs(load_codec), cfg):
        assert "g" in (await c.get("/readyz")).json()["models_unavailable"]
        resp = await c.post("/v1/models/g/jobs", json={"input": {"prompt": "hi"}})
        assert resp.status_code == 503 and resp.json()["error"]["type"] == "model_unavailable"


async def test_a_failed_load_is_tried_again_after_its_retry_delay() -> None:
    calls = 0

    def flaky(cfg: ModelConfig) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise FileNotFoundError("not mounted yet")
        return CharCodec()

    codecs = Codecs(flaky, retry_s=0.0)
    async for c in started(codecs):
        assert codecs.failed and calls == 1
        resp = await c.post("/v1/models/g/jobs", json={"input": {"prompt": "hi"}})
        assert resp.status_code == 202 and calls == 2
        assert (await c.get("/readyz")).status_code == 200

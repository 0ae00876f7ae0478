"""Text no tokenizer takes (a JSON ``\\ud800`` escape decodes to a lone surrogate)
is the client's error on every generative route, naming the field: never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.generate_service import Codecs, GenerateRequest, _tokenize, load_codec
from sluice.errors import InvalidInput
from sluice.generate.prompt import PromptCodec
from sluice.generate.tiny import ensure_tiny_tokenizer

JSON = {"content-type": "application/json"}
CHAT = '[{"role":"user","content":"hi \\udfff"}]'
PROMPT = '"a\\ud800b"'

ROUTES = [
    ("/v1/chat/completions", f'{{"model":"g","messages":{CHAT}}}', 400, "messages[0].content"),
    ("/v1/completions", f'{{"model":"g","prompt":{PROMPT}}}', 400, "prompt"),
    ("/v1/models/g/jobs", f'{{"input":{{"messages":{CHAT}}}}}', 422, "messages[0].content"),
    ("/v1/models/g/jobs", f'{{"input":{{"prompt":{PROMPT}}}}}', 422, "prompt"),
    ("/v1/models/g/predict", f'{{"input":{{"messages":{CHAT}}}}}', 422, "messages[0].content"),
    (
        "/v1/models/g/jobs/batch",
        f'{{"inputs":[{{"prompt":"ok"}},{{"messages":{CHAT}}}]}}',
        422,
        "inputs[1]",
    ),
]


@pytest.fixture(scope="module")
def codec() -> PromptCodec:
    return PromptCodec.load(ensure_tiny_tokenizer("tiny:2x64"))


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(("path", "body", "status", "names"), ROUTES)
async def test_a_lone_surrogate_is_refused_in_the_routes_shape(
    gen: Any, path: str, body: str, status: int, names: str
) -> None:
    gen.state.codecs = Codecs(load_codec)  # the real tokenizer, which refuses it
    resp = await gen.client.post(path, content=body, headers=JSON)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert names in error["message"]  # a prompt is refused by its schema already
    assert "not valid Unicode" in error["message"] or "unicode string" in error["message"]
    assert not [k async for k in gen.redis.scan_iter("*:job:*")]


def test_the_codec_names_the_field_holding_a_lone_surrogate(codec: PromptCodec) -> None:
    with pytest.raises(ValueError, match=r"prompt: not valid Unicode"):
        codec.encode("a\ud800")
    bad = [{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "name": "\udc00"}]
    with pytest.raises(ValueError, match=r"messages\[1\]\.name: not valid Unicode"):
        codec.chat(bad)


class Refusing:
    def encode(self, text: str) -> list[int]:
        raise TypeError("TextInputSequence must be str")

    def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        raise TypeError("TextInputSequence must be str")


@pytest.mark.parametrize(
    "req", [GenerateRequest(prompt="x"), GenerateRequest(messages=[{"role": "u", "content": "x"}])]
)
def test_a_tokenizers_type_error_is_the_clients_invalid_input(req: GenerateRequest) -> None:
    with pytest.raises(InvalidInput, match="TextInputSequence"):
        _tokenize(Refusing(), req)

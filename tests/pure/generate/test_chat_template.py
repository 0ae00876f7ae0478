"""Chat templates render as transformers renders them (``strftime_now``, the
``{% generation %}`` tag, transformers' ``tojson``), and a template that does
not compile is a config error found when the codec loads: never a client's 4xx."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from tokenizers import Tokenizer

from gateway.generate_service import Codecs
from sluice.config import ModelConfig
from sluice.errors import ConfigError, ModelUnavailable
from sluice.generate.prompt import PromptCodec
from sluice.generate.tiny import ensure_tiny_tokenizer

MESSAGES = [
    {"role": "system", "content": "Be brief <b>."},
    {"role": "user", "content": "Hi é"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "And?"},
]
TEMPLATES = [
    "Today {{ strftime_now('%Y') }}."
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
    "{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
    "{{ messages | tojson }}|{{ messages[0] | tojson(indent=2, sort_keys=True) }}|"
    "{{ messages[1] | tojson(separators=(',', ':'), ensure_ascii=True) }}",
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return Tokenizer.from_file(str(ensure_tiny_tokenizer("tiny:2x64") / "tokenizer.json"))


def codec(tokenizer: Any, template: str) -> PromptCodec:
    return PromptCodec(tokenizer, {"chat_template": template, "eos_token": "<|endoftext|>"})


@pytest.mark.parametrize("template", TEMPLATES)
def test_transformers_globals_filters_and_tags_render(tokenizer: Any, template: str) -> None:
    text = codec(tokenizer, template).render_chat(MESSAGES)
    assert "Hello" in text and "Hi" in text
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(ensure_tiny_tokenizer("tiny:2x64"))
    want = hf.apply_chat_template(
        MESSAGES, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert text == want


def test_strftime_now_is_the_servers_clock(tokenizer: Any) -> None:
    text = codec(tokenizer, "{{ strftime_now('%Y') }}").render_chat(MESSAGES)
    assert text in {str(datetime.now().year - 1), str(datetime.now().year)}


def test_a_template_that_does_not_compile_is_a_config_error_at_load(tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="chat template does not compile"):
        codec(tokenizer, "{% for m in messages %}{{ m.content }}")  # no endfor


async def test_the_gateway_reports_it_as_the_models_fault_not_the_clients(
    tokenizer: Any,
) -> None:
    codecs = Codecs(lambda _cfg: codec(tokenizer, "{% if %}"))
    cfg = ModelConfig(handler="causal-lm", params={"model": "tiny:2x64"}, generate={})
    await codecs.load_all({"g": cfg})
    assert "does not compile" in codecs.failed["g"]
    with pytest.raises(ModelUnavailable, match="did not load"):
        await codecs.get("g", cfg)

"""A model's prompt codec: text and chat messages to token ids, and back.

Loaded from a Hugging Face model directory's ``tokenizer.json`` (the
``tokenizers`` library, no torch, no transformers) and the chat template in its
``tokenizer_config.json``, compiled when the codec loads (a template that does
not compile is a ConfigError: the server's, never a client's) and rendered with
jinja2 in a sandbox the way transformers renders it (its ``raise_exception``,
``strftime_now``, ``tojson`` and ``{% generation %}``; same ids as
``AutoTokenizer.apply_chat_template``).
The gateway uses it to count and store a prompt's ids; engines use its
``detokenizer`` to stream text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from sluice.errors import ConfigError
from sluice.generate.detok import IncrementalDetokenizer

MESSAGE_KEYS = frozenset({"role", "content", "name"})


class PromptCodec:
    """Encode prompts and decode outputs for one model."""

    def __init__(self, tokenizer: Any, tokenizer_config: Mapping[str, Any]) -> None:
        self._tok = tokenizer
        self._config = dict(tokenizer_config)
        template = self._config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        self._template_src: str | None = template
        # Compiled at load: a template that does not compile is the server's fault.
        self._template: Any = _compile(template) if template else None
        self.eos_token: str | None = _token_text(self._config.get("eos_token"))
        self.bos_token: str | None = _token_text(self._config.get("bos_token"))
        self.eos_token_id: int | None = self._id_of(self.eos_token)

    @classmethod
    def load(cls, model_dir: Path) -> PromptCodec:
        """The codec of a model directory holding ``tokenizer.json``."""
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        tok_file = model_dir / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"{model_dir}: no tokenizer.json (a fast tokenizer is needed)")
        cfg_file = model_dir / "tokenizer_config.json"
        config = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
        template_file = model_dir / "chat_template.jinja"
        if "chat_template" not in config and template_file.is_file():
            config["chat_template"] = template_file.read_text(encoding="utf-8")
        return cls(Tokenizer.from_file(str(tok_file)), config)

    @classmethod
    def for_model(cls, model_cfg: Any) -> PromptCodec:
        """The codec of a configured model (its handler's ``model`` param), built
        and cached once per directory. A tiny model builds only its tokenizer."""
        from sluice.generate.tiny import resolve_tokenizer_dir

        model = model_cfg.params.get("model")
        if not isinstance(model, str) or not model:
            raise ValueError("a generative model's handler needs params.model")
        return _cached_load(str(resolve_tokenizer_dir(model)))

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @property
    def has_chat_template(self) -> bool:
        return bool(self._template_src)

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (no special tokens added)."""
        if not isinstance(text, str):
            raise ValueError("prompt: a string")
        _check_text(text, "prompt")
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Token ids of a conversation rendered by the chat template, with the
        assistant's turn opened (``add_generation_prompt``)."""
        return self.encode(self.render_chat(messages))

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        _check_messages(messages)
        if self._template is None:
            raise ValueError("this model has no chat template: send a prompt, not messages")
        try:
            return str(
                self._template.render(
                    messages=[dict(m) for m in messages],
                    add_generation_prompt=True,
                    eos_token=self.eos_token or "",
                    bos_token=self.bos_token or "",
                )
            )
        except _TemplateError as e:
            raise ValueError(f"messages: {e}") from e

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens left out."""
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def detokenizer(self, stop: Sequence[str] = ()) -> IncrementalDetokenizer:
        """A fresh incremental detokenizer for one sequence's output."""
        return IncrementalDetokenizer(self.decode, stop)

    def _id_of(self, token: str | None) -> int | None:
        if token is None:
            return None
        found = self._tok.token_to_id(token)
        return None if found is None else int(found)


class _TemplateError(Exception):
    """A chat template called ``raise_exception`` or failed to render."""


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages: a non-empty list of {role, content} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}]: an object with role and content")
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}]: role and content must both be strings")
        extra = set(m) - MESSAGE_KEYS
        if extra:
            raise ValueError(f"messages[{i}]: unknown field(s) {sorted(extra)}")
        for key in sorted(MESSAGE_KEYS & set(m)):
            if isinstance(m[key], str):
                _check_text(m[key], f"messages[{i}].{key}")


def _check_text(text: str, where: str) -> None:
    """ValueError unless the text is valid Unicode (JSON's ``\\ud800`` escapes decode
    to lone surrogates, which no tokenizer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}: not valid Unicode text (a lone surrogate at character {e.start})"
        ) from None


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` filter (not jinja2's, which escapes HTML)."""
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _compile(source: str) -> Any:
    """The template compiled as transformers compiles it (its globals, filters and
    ``{% generation %}`` tag); ConfigError when it does not compile."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise _TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _generation_extension()],
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    try:
        return _Wrapped(env.from_string(source), TemplateError)
    except TemplateError as e:
        raise ConfigError(f"the model's chat template does not compile: {e}") from e


def _generation_extension() -> Any:
    """``{% generation %}...{% endgeneration %}`` (marks the assistant's tokens for
    transformers' ``return_assistant_tokens_mask``): rendered as its body."""
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return Generation


class _Wrapped:
    """A compiled template whose jinja2 errors come out as ``_TemplateError``."""

    def __init__(self, template: Any, error_type: type[Exception]) -> None:
        self._template = template
        self._error_type = error_type

    def render(self, **kwargs: Any) -> str:
        try:
            return str(self._template.render(**kwargs))
        except self._error_type as e:
            raise _TemplateError(str(e)) from e


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<|endoftext|>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


@lru_cache(maxsize=16)
def _cached_load(model_dir: str) -> PromptCodec:
    return PromptCodec.load(Path(model_dir))

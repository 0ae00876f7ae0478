"""Built-in handlers by name, and ``package.module:Class`` for a user's own.

Built-ins are imported only when chosen, so a synthetic worker never imports torch.
"""

from __future__ import annotations

import importlib

from sluice.errors import ConfigError
from workers.handlers.base import Collated, Handler, HandlerContext, Shape, warmup_shapes

BUILTINS: dict[str, str] = {
    "synthetic": "workers.handlers.synthetic:SyntheticHandler",
    "tiny": "workers.handlers.tiny:TinyHandler",
    "embedding": "workers.handlers.embedding:EmbeddingHandler",
    "causal-lm": "workers.generate.handler:CausalLMHandler",  # a generate: model
}

__all__ = [
    "BUILTINS",
    "Collated",
    "Handler",
    "HandlerContext",
    "Shape",
    "load_handler_class",
    "make_handler",
    "warmup_shapes",
]


def load_handler_class(spec: str) -> type[Handler]:
    """A built-in name or ``package.module:Class``; ConfigError with the reason otherwise."""
    target = BUILTINS.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"handler {spec!r}: not a built-in ({', '.join(BUILTINS)}) nor 'package.module:Class'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"handler {spec!r}: cannot import {module_name}: {e}") from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type) or not issubclass(cls, Handler):
        raise ConfigError(f"handler {spec!r}: {target} is not a workers.handlers.Handler subclass")
    return cls


def make_handler(ctx: HandlerContext) -> Handler:
    return load_handler_class(ctx.config.handler)(ctx)

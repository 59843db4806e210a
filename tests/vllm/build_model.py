"""Build the vLLM tier's tiny model offline: ``python build_model.py OUT_DIR``.

A Qwen3ForCausalLM with 2 layers and random weights, scaled so that its next-token
distribution is peaked (a token read one position off then has a very different
logprob), and a byte-level BPE tokenizer trained here on local text with the Qwen2
pre-tokenizer, Qwen3's special and added tokens, and Qwen3's real chat template from
the ``trl`` wheel (fetched with ``pip download``; trl itself is not installed).
The training variant of the template (prefix-preserving) is saved beside it.

Run with the vLLM tier's venv (torch, transformers, tokenizers); deterministic for a
given set of packages. Writes ``contagent-meta.json`` with the ids the tests use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TRL_VERSION = "1.16.0"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
]
# Qwen2's pre-tokenizer split (tokenizer.json of the Qwen2/Qwen3 models)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB = 2000
#: the weights' init scale: large enough that the distribution is peaked
INIT_RANGE = 0.3


def chat_templates(work: Path) -> dict[str, str]:
    """qwen3.jinja and qwen3_training.jinja out of the trl wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         f"trl=={TRL_VERSION}", "-d", str(work)],
        check=True,
    )  # fmt: skip
    wheel = next(work.glob("trl-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        return {
            name: zf.read(f"trl/chat_templates/{name}.jinja").decode()
            for name in ("qwen3", "qwen3_training")
        }


def corpus(template: str) -> list[str]:
    """Local, deterministic text: some of Python's own sources, chat-shaped lines, JSON."""
    import json as json_mod
    import textwrap

    texts = [template]
    for mod in (json_mod, textwrap):
        texts.append(Path(mod.__file__ or "").read_text())
    for city in ("Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo"):
        texts.append(json.dumps({"name": "get_weather", "arguments": {"city": city}}))
        texts.append(f"The weather in {city} is sunny. Let me check the files first.\n")
    texts.append("ls -la\ncat README.md\npython -m pytest -q\ngit diff\n" * 4)
    return texts


def build_tokenizer(template: str) -> object:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus(template), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tok.add_tokens(ADDED)
    tok.chat_template = template
    return tok


def build_model(vocab_size: int, eos: int, pad: int) -> object:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        initializer_range=INIT_RANGE,
        tie_word_embeddings=False,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
        torch_dtype="bfloat16",
    )
    return Qwen3ForCausalLM(config).to(torch.bfloat16)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        templates = chat_templates(Path(work))
    tok = build_tokenizer(templates["qwen3"])
    tok.save_pretrained(out)  # type: ignore[attr-defined]
    (out / "qwen3_training.jinja").write_text(templates["qwen3_training"])
    vocab = tok.get_vocab()  # type: ignore[attr-defined]
    eos, pad = vocab["<|im_end|>"], vocab["<|endoftext|>"]
    model = build_model(len(vocab), eos, pad)
    model.generation_config.eos_token_id = eos  # type: ignore[attr-defined]
    model.save_pretrained(out)  # type: ignore[attr-defined]
    meta = {
        "eos_token_id": eos,
        "vocab_size": len(vocab),
        "ids": {t: vocab[t] for t in SPECIAL + ADDED},
    }
    (out / "contagent-meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Tiny local stand-ins for a model and its tokenizer: no weights can be downloaded here.

The tokenizer is a byte-level BPE trained on the export's own text, with the special
tokens of the chat template (or renderer) it is paired with added as single tokens;
the model is a randomly initialised 2-layer Llama. Chat templates are the real ones
the ``trl`` wheel ships.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TOKEN = re.compile(
    r"<\|[^|<>\s]{1,40}\|>|\[gMASK\]|<sop>|</?think>|</?tool_call>|</?tool_response>"
    r"|</?arg_key>|</?arg_value>|</?tools>"
)
"""What a special token looks like in the chat templates and renderers used here."""


def templates_dir() -> Path:
    import trl

    return Path(trl.__file__).parent / "chat_templates"


def template(name: str) -> str:
    return (templates_dir() / f"{name}.jinja").read_text()


def special_tokens(*sources: str) -> list[str]:
    return sorted({t for text in sources for t in TOKEN.findall(text)})


def tokenizer(
    texts: Iterable[str],
    specials: list[str],
    eos: str,
    chat_template: str | None,
    bos: str | None = None,
) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=sorted({*specials, *([bos] if bos else [])}),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(texts), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eos, pad_token=eos)
    if bos is not None:
        tok.bos_token = bos
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


def model(vocab_size: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=16384,
    )
    return LlamaForCausalLM(config)

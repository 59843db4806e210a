"""prime-rl's renderers take every prime-sft row as its SFT data path reads it.

prime-rl's ``SFTDataset`` loads the folder with ``datasets``, drops null-valued message
fields, parses each call's JSON-string ``arguments`` and the ``tools`` column, and hands
the conversation to a typed renderer's ``build_training_sample`` (loss on the
renderer's sampled tokens: assistant output only). This does the same, then checks
the loss mask against the renderer's own per-token message attribution.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainers import tiny

pytestmark = pytest.mark.trainers

# prime-qwen3 is the Qwen3-Coder-style renderer (XML tool definitions and calls).
RENDERERS = ["qwen3", "qwen3.5", "prime-qwen3", "llama-3", "glm-4.5", "kimi-k2"]
#: Renderers of families that take one tool call per assistant turn: rows with parallel
#: calls are theirs to refuse (they raise), so those rows are left out for them.
SINGLE_CALL = {"llama-3"}


#: Renderers whose template takes a system message only as the first message (Qwen3.5):
#: rows with one later on (Claude Code sends one second) are theirs to refuse (they raise),
#: so those rows are left out for them.
LEADING_SYSTEM_ONLY = {"qwen3.5"}


def late_system(row: dict[str, Any]) -> bool:
    return any(m["role"] == "system" for m in row["messages"][1:])


def parallel_calls(row: dict[str, Any]) -> bool:
    return any(len(m["tool_calls"] or []) > 1 for m in row["messages"])


def _as_prime_rl_reads(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    messages = []
    for message in row["messages"]:
        m = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in m:
            m["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in m["tool_calls"]
            ]
        messages.append(m)
    return messages, json.loads(row["tools"])


def _renderer_config(name: str) -> Any:
    from renderers import configs

    for value in vars(configs).values():
        fields = getattr(value, "model_fields", None)
        if (
            isinstance(value, type)
            and fields
            and "name" in fields
            and fields["name"].default == name
        ):
            return value()
    raise AssertionError(f"renderers has no config named {name!r}")


def _renderer_specials() -> list[str]:
    import renderers

    sources = [p.read_text() for p in Path(renderers.__file__).parent.glob("*.py")]
    return tiny.special_tokens(*sources)


def _check_rows(export_dir: Path, name: str, **sample_options: Any) -> None:
    from datasets import load_dataset
    from renderers.base import build_training_sample, create_renderer

    ds = load_dataset(str(export_dir / "prime-sft"), split="train")
    if name in SINGLE_CALL:
        ds = ds.filter(lambda r: not parallel_calls(r))
    refused = ds.filter(late_system) if name in LEADING_SYSTEM_ONLY else []
    if name in LEADING_SYSTEM_ONLY:
        ds = ds.filter(lambda r: not late_system(r))
    assert len(ds) > 0
    tok = tiny.tokenizer(
        (json.dumps(r["messages"]) for r in ds), _renderer_specials(), "<|im_end|>", None
    )
    renderer = create_renderer(tok, _renderer_config(name))
    for row in refused:  # left out because the template refuses them, not for anything else
        messages, tools = _as_prime_rl_reads(row)
        with pytest.raises(ValueError, match="System message must be at the beginning"):
            renderer.render(messages, tools=tools)
    for row in ds:
        messages, tools = _as_prime_rl_reads(row)
        sample = build_training_sample(
            renderer, messages, tools=tools, ensure_final_stop=True, **sample_options
        )
        owners = renderer.render(messages, tools=tools).message_indices
        mask = list(sample.loss_mask)
        assert len(mask) == len(sample.token_ids) >= len(owners)
        assistants = {i for i, m in enumerate(messages) if m["role"] == "assistant"}
        trained_owners = {owners[k] for k, m in enumerate(mask[: len(owners)]) if m}
        # Only assistant turns are trained, and every assistant turn is.
        assert trained_owners <= assistants, (name, row["rollout_id"], trained_owners - assistants)
        assert trained_owners == assistants, (name, row["rollout_id"], assistants - trained_owners)
        # A stop token appended after the render is the last assistant turn's.
        assert all(mask[len(owners) :])


@pytest.mark.parametrize("name", RENDERERS)
def test_every_prime_sft_row_renders_with_assistant_only_loss(export_dir: Path, name: str) -> None:
    _check_rows(export_dir, name)


def test_the_check_catches_a_mask_that_trains_tool_outputs(export_dir: Path) -> None:
    with pytest.raises(AssertionError):
        _check_rows(export_dir, "qwen3", content_sft_roles={"tool"})

"""TRL's SFTTrainer trains on the trl folder as it loads, with real chat templates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainers import tiny

pytestmark = pytest.mark.trainers

# (template shipped in trl/chat_templates, its end-of-turn token, assistant-only loss).
# qwen3_5_nothink renders calls in the Qwen3-Coder XML format (<function=...><parameter=...>)
# and glm4moe as <arg_key>/<arg_value> pairs; both need arguments to be a mapping.
# llama3_1 and llama3_2 have no TRL training template, so TRL cannot mask them to
# assistant turns; they train on every token. (TRL's llama3 template renders no tool calls.) gptoss refuses an assistant turn with content, reasoning and
# tool calls together (a template limit, not a data one), so it is not listed.
TEMPLATES = [
    ("qwen2_5", "<|im_end|>", True),
    ("qwen3", "<|im_end|>", True),
    ("qwen3_5_nothink", "<|im_end|>", True),
    ("glm4moe", "<|user|>", True),
    ("llama3_1", "<|eot_id|>", False),
    ("llama3_2", "<|eot_id|>", False),
]


def _calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["function"] for m in messages for c in (m["tool_calls"] or [])]


def _assert_arguments_once_as_objects(
    text: str, messages: list[dict[str, Any]], style: str
) -> None:
    calls = _calls(messages)
    for call in calls:
        args = call["arguments"]
        assert isinstance(args, dict)
        # The double-encoded form a JSON string in `arguments` would give.
        doubled = json.dumps(json.dumps(args, ensure_ascii=False), ensure_ascii=False)[1:-1]
        assert doubled not in text, doubled
        if style == "parameter":
            for key, value in args.items():
                assert f"<parameter={key}>\n{value}\n</parameter>" in text
        elif style == "arg_key":
            for key, value in args.items():
                assert f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>" in text
        else:
            same = sum(1 for c in calls if c["arguments"] == args)
            assert text.count(json.dumps(args, ensure_ascii=False)) == same, args


def _assert_trained_on_assistant_turns_only(
    tok: Any, example: dict[str, Any], messages: list[dict[str, Any]]
) -> None:
    ids, labels = example["input_ids"], example["labels"]
    mask = [lab != -100 for lab in labels]
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    # One trained stretch per assistant turn, and nothing else.
    stretches = sum(1 for k, m in enumerate(mask) if m and (k == 0 or not mask[k - 1]))
    assert stretches == sum(1 for m in messages if m["role"] == "assistant")
    said = " ".join(
        [m["content"] or "" for m in messages if m["role"] == "assistant"]
        + [json.dumps(c["arguments"], ensure_ascii=False) for c in _calls(messages)]
    )
    for m in messages:
        content = (m["content"] or "").strip()
        if m["role"] == "assistant":
            assert content in trained
            for call in m["tool_calls"] or []:
                assert call["function"]["name"] in trained
        elif len(content) > 8 and content not in said:
            # System prompts, tasks and tool outputs are context, never targets.
            assert content not in trained, (m["role"], content[:60])


@pytest.mark.parametrize(("name", "eos", "assistant_only"), TEMPLATES)
def test_sft_trainer_trains_on_the_trl_folder(
    export_dir: Path, tmp_path: Path, name: str, eos: str, assistant_only: bool
) -> None:
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    ds = load_dataset(str(export_dir / "trl"), split="train")
    if name.startswith("llama"):
        # Llama 3 templates take one tool call per assistant turn and raise on more: rows
        # with parallel calls are the template's to refuse, so they are left out here.
        ds = ds.filter(lambda r: not any(len(m["tool_calls"] or []) > 1 for m in r["messages"]))
    refused = []
    if name.startswith("qwen3_5"):
        # Qwen3.5 takes a system message only first and raises on a later one (Claude Code
        # sends one second): such rows are the template's to refuse, so they are left out here.
        refused = ds.filter(lambda r: any(m["role"] == "system" for m in r["messages"][1:]))
        ds = ds.filter(lambda r: not any(m["role"] == "system" for m in r["messages"][1:]))
    assert len(ds) > 0
    chat_template = tiny.template(name)
    training = tiny.templates_dir() / f"{name}_training.jinja"
    specials = tiny.special_tokens(chat_template, training.read_text() if training.exists() else "")
    assert eos in specials
    # Llama templates open with bos_token, which they name rather than spell out.
    bos = "<|begin_of_text|>" if name.startswith("llama") else None
    texts = (json.dumps(r["messages"]) for r in ds)
    tok = tiny.tokenizer(texts, specials, eos, chat_template, bos=bos)

    for row in refused:  # left out because the template refuses them, not for anything else
        with pytest.raises(Exception, match="System message must be at the beginning"):
            tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)

    style = next((s for s in ("parameter", "arg_key") if f"<{s}" in chat_template), "json")
    for row in ds:
        text = tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
        _assert_arguments_once_as_objects(text, row["messages"], style)

    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        assistant_only_loss=assistant_only,
        max_length=16384,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(
        model=tiny.model(len(tok)), args=args, train_dataset=ds, processing_class=tok
    )
    result = trainer.train()
    assert result.global_step == 2
    assert result.training_loss > 0
    if assistant_only:
        processed = trainer.train_dataset
        by_key = {(r["rollout_id"], r["branch"]): r for r in ds}
        assert len(processed) == len(ds)
        for example, row in zip(processed, ds, strict=True):
            assert by_key[(row["rollout_id"], row["branch"])] is not None
            _assert_trained_on_assistant_turns_only(tok, example, row["messages"])


def test_the_checks_catch_string_arguments_and_full_sequence_loss(export_dir: Path) -> None:
    """The same checks on the prime-sft folder fail: the string arguments are encoded twice."""
    from datasets import load_dataset

    chat_template = tiny.template("qwen2_5")
    ds = load_dataset(str(export_dir / "prime-sft"), split="train")
    specials = tiny.special_tokens(chat_template)
    tok = tiny.tokenizer(
        (json.dumps(r["messages"]) for r in ds), specials, "<|im_end|>", chat_template
    )
    row = next(r for r in ds if _calls(r["messages"]))
    text = tok.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
    trl_like = [
        {**m, "tool_calls": [
            {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
            for c in m["tool_calls"]
        ] if m["tool_calls"] else None}
        for m in row["messages"]
    ]  # fmt: skip
    with pytest.raises(AssertionError):
        _assert_arguments_once_as_objects(text, trl_like, "json")
    ids = tok(text)["input_ids"]
    every_token = {"input_ids": ids, "labels": list(ids)}
    with pytest.raises(AssertionError):
        _assert_trained_on_assistant_turns_only(tok, every_token, row["messages"])


@pytest.mark.parametrize("name", ["qwen3_5_nothink", "glm4moe"])
def test_xml_call_templates_cannot_render_string_arguments(export_dir: Path, name: str) -> None:
    """Why the trl folder exists: these templates iterate over arguments as a mapping."""
    from datasets import load_dataset

    chat_template = tiny.template(name)
    prime = load_dataset(str(export_dir / "prime-sft"), split="train")
    tok = tiny.tokenizer(["x"], tiny.special_tokens(chat_template), "<|im_end|>", chat_template)
    row = next(r for r in prime if _calls(r["messages"]))
    with pytest.raises(Exception, match=r"mapping|items"):
        tok.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
    trl = load_dataset(str(export_dir / "trl"), split="train")
    same = next(
        r for r in trl if (r["rollout_id"], r["branch"]) == (row["rollout_id"], row["branch"])
    )
    assert tok.apply_chat_template(same["messages"], tools=same["tools"], tokenize=False)


def test_the_folders_hold_function_tools_only_the_mapped_sample_among_them(
    export_dir: Path,
) -> None:
    """What the trainers above train on: every tool a named function with an object schema;
    the built-in-tools sample as run against vLLM, mapped; without a server, left out."""
    from datasets import load_dataset

    for fmt in ("trl", "prime-sft"):
        ds = load_dataset(str(export_dir / fmt), split="train")
        for row in ds:
            tools = json.loads(row["tools"]) if fmt == "prime-sft" else row["tools"]
            for tool in tools:
                assert tool["type"] == "function", (row["rollout_id"], tool)
                assert tool["function"]["name"]
                assert tool["function"]["parameters"]["type"] == "object"
        ids = set(ds["rollout_id"])
        assert "responses_builtin_tools_vllm" in ids
        assert "responses_builtin_tools" not in ids

"""The two template decisions vLLM's Messages server makes, made through the chat route."""

from __future__ import annotations

from contagent.wire.translate import template_probe as tp


def test_the_merge_probe_is_vllms_conversation_and_a_refusal_means_merge() -> None:
    body = tp.merge_probe("m", chat_template="{{ x }}")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system", "user"]
    assert body["max_tokens"] == 1 and body["chat_template"] == "{{ x }}"
    assert "chat_template" not in tp.merge_probe("m")
    assert (tp.merge_decision(200), tp.merge_decision(400), tp.merge_decision(500)) == (
        False,
        True,
        None,
    )


def test_disabled_thinking_is_none_unless_the_template_refuses_or_ignores_it() -> None:
    probes = tp.effort_probes("m")
    assert list(probes) == ["none", "low", "medium", "high", "xhigh", "max"]
    assert all(b["reasoning_effort"] == e and b["return_token_ids"] for e, b in probes.items())
    distinct = {
        "none": [1, 2],
        "low": [1, 3],
        "medium": [1, 4],
        "high": [1, 5],
        "xhigh": None,
        "max": None,
    }
    assert tp.disabled_thinking_effort(distinct) == "none"
    assert tp.disabled_thinking_effort({**distinct, "none": None}) == "low"  # refused
    assert (
        tp.disabled_thinking_effort({**distinct, "max": [1, 2]}) == "low"
    )  # rendered as an effort


def test_prompt_ids_are_read_only_from_a_good_answer() -> None:
    assert tp.prompt_ids(200, {"prompt_token_ids": [3, 4]}) == [3, 4]
    assert tp.prompt_ids(400, {"prompt_token_ids": [3, 4]}) is None
    assert tp.prompt_ids(200, {"prompt_token_ids": None}) is None
    assert tp.prompt_ids(200, "x") is None

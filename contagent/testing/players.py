"""Scripted models that play ``experiments/exp_001`` as each shipped agent's model would.

Each reads what the real tool printed in the container from the conversation it
is sent, and writes ``pass:<secret>`` only from there, so a pass proves the real
agent ran the real tool. The moves depend only on the request, so one stub
serves several agents and concurrent rollouts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from contagent.testing.llm_stub import Reply, StubRequest, ToolCall
from contagent.testing.messages_moves import is_messages
from contagent.testing.responses_moves import is_responses
from contagent.wire.chat import message_text

#: the secret exp_001's setup.sh writes
SECRET = re.compile(r"s-[0-9a-f]{24}")


def _answer(outputs: list[str]) -> str:
    seen = SECRET.search(outputs[0])
    return f"pass:{seen.group(0) if seen else 'NOT-SEEN'}"


def _shell_move(outputs: list[str], answer: str | None = None) -> str | None:
    """exp_001's two shell commands, from the tool outputs so far; None once both ran.

    ``answer`` overrides what is written (a wrong answer)."""
    if not outputs:
        return "cat ~/workspace/secret.txt"
    if len(outputs) == 1:
        value = answer if answer is not None else _answer(outputs)
        return f"printf '%s' '{value}' > ~/workspace/result.txt"
    return None


def codex_outputs(req: StubRequest) -> list[str]:
    """What Codex's tool printed, from the Responses ``input`` items it sent (or the tool
    messages of the chat request the proxy's token route made of them)."""
    if not is_responses(req):
        return tool_outputs(req)
    return [
        message_text(item.get("output"))
        for item in req.json.get("input", [])
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def codex(req: StubRequest) -> Reply:
    cmd = _shell_move(codex_outputs(req))
    if cmd is None:
        return Reply(content="Wrote the answer to result.txt.")
    return Reply(content=None, tool_calls=[ToolCall("exec_command", {"cmd": cmd})])


def claude_code_outputs(req: StubRequest) -> list[str]:
    """What Claude Code's Bash tool printed, from the ``tool_result`` blocks it sent (or the
    tool messages of the chat request the proxy's token route made of them)."""
    if not is_messages(req):
        return tool_outputs(req)
    found = []
    for message in req.json.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found.append(message_text(block.get("content")))
    return found


def claude_code(req: StubRequest) -> Reply:
    """Claude Code's model: its Bash tool (with the description it asks for), then a text answer."""
    cmd = _shell_move(claude_code_outputs(req))
    if cmd is None:
        return Reply(content="Wrote the answer to result.txt.")
    bash = ToolCall("Bash", {"command": cmd, "description": "Run one step of the task"})
    return Reply(content="Next step.", tool_calls=[bash])


def tool_outputs(req: StubRequest) -> list[str]:
    return [message_text(m.get("content")) for m in req.json["messages"] if m.get("role") == "tool"]


def mini(req: StubRequest) -> Reply:
    command = _shell_move(tool_outputs(req)) or "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    return Reply(content="Next step.", tool_calls=[ToolCall("bash", {"command": command})])


def terminal(command: str) -> Reply:
    """OpenHands' terminal tool called with ``command``."""
    call = ToolCall("terminal", {"command": command, "security_risk": "LOW"})
    return Reply(content=None, tool_calls=[call])


#: OpenHands' finish tool
FINISH = Reply(content=None, tool_calls=[ToolCall("finish", {"message": "done"})])


def openhands_writing(answer: str | None = None) -> Callable[[StubRequest], Reply]:
    """OpenHands' model; ``answer`` overrides what it writes (a wrong answer)."""

    def play(req: StubRequest) -> Reply:
        command = _shell_move(tool_outputs(req), answer)
        return FINISH if command is None else terminal(command)

    return play


openhands = openhands_writing()


PLAYERS: dict[str, Callable[[StubRequest], Reply]] = {
    "openhands": openhands,
    "mini-swe-agent": mini,
    "codex": codex,
    "claude-code": claude_code,
}


#: the shell tool by which each agent's requests are told apart on the chat route
CODEX_TOOL, CLAUDE_CODE_TOOL = "exec_command", "Bash"


def _tool_names(req: StubRequest) -> set[str]:
    """The function tools' names of a chat request (none for Messages or Responses)."""
    tools = req.json.get("tools") or []
    return {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}


def any_agent() -> Callable[[StubRequest], Reply]:
    """One player for all four: Codex speaks Responses, Claude Code Messages, mini-swe-agent
    has only ``bash``. Through the proxy's token route Codex and Claude Code arrive as chat
    requests, told apart by their tools (``exec_command``, ``Bash``)."""

    def play(req: StubRequest) -> Reply:
        names = _tool_names(req)
        if is_responses(req) or CODEX_TOOL in names:
            return codex(req)
        if is_messages(req) or CLAUDE_CODE_TOOL in names:
            return claude_code(req)
        if names == {"bash"}:
            return mini(req)
        return openhands(req)

    return play


def thinking(player: Callable[[StubRequest], Reply]) -> Callable[[StubRequest], Reply]:
    """``player`` with reasoning before each answer (a thinking block on Messages, a reasoning
    item on Responses, ``reasoning`` on chat), as a thinking model's server returns it."""

    def play(req: StubRequest) -> Reply:
        reply = player(req)
        step = "answer" if not reply.tool_calls else f"call {reply.tool_calls[0].name}"
        return replace(reply, reasoning_content=f"The task needs one more step, so I {step}.")

    return play


def seen_secrets(requests: list[StubRequest]) -> set[str]:
    """The secrets the model was shown by the agents' tools, over all requests."""
    found = set()
    for req in requests:
        if req.json is None:  # not a generation: the run's preflight GET /v1/models
            continue
        if is_responses(req):
            outputs = codex_outputs(req)
        elif is_messages(req):
            outputs = claude_code_outputs(req)
        else:
            outputs = tool_outputs(req)
        for out in outputs:
            if m := SECRET.search(out):
                found.add(m.group(0))
    return found

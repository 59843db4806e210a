"""The agent modules on the host: settings each agent is given, launch, and reading back its log."""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from contagent.agents import AGENTS, AgentSettings, get_agent, unhonoured
from contagent.agents.base import AGENT_DIR
from contagent.agents.claude_code import AGENT as CLAUDE_CODE
from contagent.agents.codex import AGENT as CODEX
from contagent.agents.codex import config_toml
from contagent.agents.mini_swe_agent import AGENT as MINI
from contagent.agents.mini_swe_agent import model_kwargs
from contagent.agents.openhands import AGENT as OPENHANDS
from contagent.agents.openhands import llm_kwargs
from contagent.errors import ContagentError
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import LlmOptions, RunConfig, agent_images, rollout_name
from contagent.runner.lifecycle import agent_main
from contagent.testing.llm_stub import StubRequest
from contagent.testing.players import any_agent, seen_secrets
from tests.helpers import REPO

BASE = AgentSettings(
    task="do it",
    served_model_name="m",
    base_url="http://g:1/r/x/v1",
    num_retries=0,
    timeout_s=900.0,
    max_iterations=5,
)
SAMPLED = replace(
    BASE, temperature=0.2, top_p=0.9, reasoning_effort="low", extra_body={"top_k": 20}
)


def test_openhands_llm_settings_are_set_deliberately() -> None:
    kw = llm_kwargs(BASE, "openai/m")
    # OpenHands would send reasoning_effort "high" and retry 5 times by default.
    assert kw["reasoning_effort"] is None and kw["num_retries"] == 0 and kw["timeout"] == 900
    assert "capability_overrides" not in kw and "temperature" not in kw
    kw = llm_kwargs(SAMPLED, "openai/m")
    assert kw["temperature"] == 0.2 and kw["top_p"] == 0.9 and kw["reasoning_effort"] == "low"
    # Without the override the SDK silently drops sampling parameters for "reasoning" models.
    assert kw["capability_overrides"] == {"supports_sampling_params": True}
    assert kw["litellm_extra_body"] == {"top_k": 20}
    launch = OPENHANDS.launch(BASE)
    cfg = json.loads(dict((p, d) for p, d, _ in launch.files)["openhands.json"])
    assert cfg["llm"]["model"] == "openai/m" and cfg["api_key"] == "contagent-proxy"


def test_mini_swe_agent_settings_are_set_deliberately() -> None:
    kw = model_kwargs(BASE)
    # mini.yaml's drop_params would silently drop what the server does not declare.
    assert kw["drop_params"] is False and kw["max_retries"] == 0
    assert kw["api_base"] == BASE.base_url and "temperature" not in kw
    kw = model_kwargs(replace(SAMPLED, max_output_tokens=64))
    assert (kw["temperature"], kw["top_p"], kw["reasoning_effort"]) == (0.2, 0.9, "low")
    assert kw["max_tokens"] == 64 and kw["extra_body"] == {"top_k": 20}
    files = {p: d for p, d, _ in MINI.launch(BASE).files}
    cfg = json.loads(files["mini.json"])
    assert cfg["model"] == "openai/m" and cfg["max_iterations"] == 5 and cfg["num_retries"] == 0


def test_codex_provider_points_at_the_proxy_with_the_responses_api() -> None:
    conf = tomllib.loads(config_toml(replace(BASE, reasoning_effort="low", num_retries=2)))
    provider = conf["model_providers"][conf["model_provider"]]
    assert provider["base_url"] == BASE.base_url and provider["wire_api"] == "responses"
    assert provider["request_max_retries"] == 2 and provider["stream_max_retries"] == 2
    assert conf["model"] == "m" and conf["model_reasoning_effort"] == "low"
    assert "model_reasoning_effort" not in tomllib.loads(config_toml(BASE))
    launch = CODEX.launch(replace(BASE, task='it\'s "quoted"\n$(rm -rf /)'))
    files = {p: d for p, d, _ in launch.files}
    assert files["task.txt"] == b'it\'s "quoted"\n$(rm -rf /)'  # on stdin, never in a shell line
    assert b"--json" in files["codex.sh"] and launch.env["CODEX_HOME"].endswith("codex-home")


def test_claude_code_runs_headless_against_the_proxy_route_only() -> None:
    launch = CLAUDE_CODE.launch(replace(BASE, task='it\'s "quoted"\n$(rm -rf /)', skills=("s k",)))
    files = {p: d for p, d, _ in launch.files}
    assert files["task.txt"] == b'it\'s "quoted"\n$(rm -rf /)'  # on stdin, never in a shell line
    script = files["claude-code.sh"].decode()
    assert (
        "claude -p --output-format stream-json --verbose --dangerously-skip-permissions" in script
    )
    assert "--max-turns 5 < /contagent/agent/task.txt" in script
    assert "'s k'" in script and '"$HOME/.claude/skills/"' in script
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == "http://g:1/r/x"  # the client adds /v1/messages itself
    assert env["IS_SANDBOX"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    models = {k: v for k, v in env.items() if k.endswith("_MODEL")}
    assert len(models) == 6 and set(models.values()) == {"m"}
    assert env["API_TIMEOUT_MS"] == "900000" and "CLAUDE_CODE_MAX_OUTPUT_TOKENS" not in env
    capped = CLAUDE_CODE.launch(replace(BASE, max_output_tokens=512)).env
    assert capped["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "512"


def test_claude_code_event_log_is_read_back(tmp_path: Path) -> None:
    init = {"type": "system", "subtype": "init", "claude_code_version": "2.1.332", "tools": []}
    turn = {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash"}]}}
    result = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 3}
    events = [init, turn, {"type": "user", "message": {}}, turn, result]
    (tmp_path / "agent.stdout").write_text("\n".join(json.dumps(e) for e in events) + "\ntorn{")
    report = CLAUDE_CODE.report(tmp_path)
    assert (report.version, report.stop_condition, report.iterations) == ("2.1.332", "finished", 3)
    assert report.skills_loaded == [] and orjson.loads(report.events[-1]) == {"unparsed": "torn{"}
    (tmp_path / "claude-version.txt").write_text("2.1.333 (Claude Code)\n")
    (tmp_path / "claude-skills.txt").write_text("zeta\nalpha\n")
    report = CLAUDE_CODE.report(tmp_path)
    assert report.version == "2.1.333" and report.skills_loaded == ["alpha", "zeta"]
    limit = {**result, "subtype": "error_max_turns", "is_error": True}
    (tmp_path / "agent.stdout").write_text(json.dumps(limit))
    assert CLAUDE_CODE.report(tmp_path).stop_condition == "max_iterations"
    failed = {**result, "is_error": True, "result": "API Error: 500 upstream\nmore"}
    (tmp_path / "agent.stdout").write_text(json.dumps(failed))
    report = CLAUDE_CODE.report(tmp_path)
    assert report.stop_condition == "error" and report.error == "API Error: 500 upstream"


def test_each_launch_runs_the_files_it_ships() -> None:
    for agent in AGENTS.values():
        launch = agent.launch(BASE)
        shipped = {f"{AGENT_DIR}/{path}" for path, _, _ in launch.files}
        named = {arg for arg in launch.argv if arg.startswith(AGENT_DIR)}
        assert named <= shipped, agent.name
        assert named or agent.api == "none", agent.name  # the oracle runs the task's own script


def test_unhonoured_fields_are_named_in_one_line() -> None:
    requested = {"max_iterations": 5, "temperature": 0.3, "top_p": None, "extra_body": {}}
    assert unhonoured(OPENHANDS, ("s",), requested) is None
    assert unhonoured(MINI, (), requested) is None
    line = unhonoured(MINI, ("linux-networking",), requested)
    assert line is not None and "skills (linux-networking)" in line and "\n" not in line
    line = unhonoured(CODEX, (), requested)
    assert line is not None and "--max-iterations" in line and "--temperature" in line
    assert "--top-p" not in line and "--extra-body" not in line
    line = unhonoured(CLAUDE_CODE, ("s",), {**requested, "reasoning_effort": "low"})
    assert (
        line == "claude-code cannot honour --temperature, --reasoning-effort: it runs without them"
    )


def _run_config(tmp_path: Path, **options: Any) -> RunConfig:
    llm = LlmOptions(served_model_name="m")
    return RunConfig(
        experiments_dir=tmp_path, log_dir=tmp_path, upstream_url="http://x", llm=llm, **options
    )


def test_agent_names_and_rollout_names(tmp_path: Path) -> None:
    assert set(AGENTS) == {"openhands", "mini-swe-agent", "codex", "claude-code", "oracle"}
    assert rollout_name("exp_001", 0, "codex") == "exp_001__codex"
    assert rollout_name("exp_001", 1, "codex") == "exp_001_r1__codex"
    with pytest.raises(ContagentError, match="not a known agent"):
        get_agent("nope")
    with pytest.raises(ContagentError, match="not a known agent"):
        _run_config(tmp_path, agents=("openhands", "nope"))
    with pytest.raises(ContagentError, match="once"):
        _run_config(tmp_path, agents=("codex", "codex"))


def test_every_agents_image_is_named_the_same_way(tmp_path: Path) -> None:
    images = agent_images(["openhands=oh:1", "codex = reg/codex:2", "openhands=oh:1"])
    assert images == {"openhands": "oh:1", "codex": "reg/codex:2"}
    cfg = _run_config(tmp_path, agents=("codex", "mini-swe-agent"), images=images)
    assert cfg.image_for("openhands") == "oh:1"
    assert cfg.image_for("codex") == "reg/codex:2"
    assert cfg.image_for("mini-swe-agent") == MINI.image
    assert cfg.runner_images() == [("codex", "reg/codex:2"), ("mini-swe-agent", MINI.image)]
    for bad, message in (("codex", "is not AGENT=NAME"), ("=x", "is not AGENT=NAME"),
                         ("codex=", "is not AGENT=NAME"), ("nope=x", "not a known agent")):  # fmt: skip
        with pytest.raises(ContagentError, match=message):
            agent_images([bad])
    with pytest.raises(ContagentError, match="two images for codex: a, b"):
        agent_images(["codex=a", "codex=b"])
    with pytest.raises(ContagentError, match="not a known agent"):
        _run_config(tmp_path, images={"nope": "x"})


def test_result_json_has_one_agent_version(tmp_path: Path) -> None:
    written = RolloutResult(rollout_id="r", agent="openhands", agent_version="1.5")
    assert "openhands_version" not in orjson.loads(written.model_dump_json())
    old = RolloutResult.model_validate({"rollout_id": "r", "openhands_version": "1.4"})
    assert old.agent_version == "1.4"
    assert "openhands_version" not in orjson.loads(old.model_dump_json())
    both = {"rollout_id": "r", "agent_version": "1.5", "openhands_version": "1.5"}
    assert RolloutResult.model_validate(both).agent_version == "1.5"


def test_mini_trajectory_document_becomes_json_lines(tmp_path: Path) -> None:
    doc = {
        "info": {"mini_version": "2.4.6", "exit_status": "Submitted"},
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "trajectory_format": "mini-swe-agent-1.1",
    }
    (tmp_path / "mini.traj.json").write_text(json.dumps(doc, indent=2))
    (tmp_path / "mini-report.json").write_text(
        json.dumps({"version": "2.4.6", "stop_condition": "finished", "iterations": 3})
    )
    report = MINI.report(tmp_path)
    lines = [orjson.loads(line) for line in report.events]
    assert lines[0]["info"]["exit_status"] == "Submitted" and "messages" not in lines[0]
    assert lines[1:] == doc["messages"]
    assert (report.version, report.stop_condition, report.iterations) == ("2.4.6", "finished", 3)
    (tmp_path / "mini.traj.json").write_text("{torn")
    [bad] = MINI.report(tmp_path).events
    assert "unreadable" in orjson.loads(bad)["unparsed"]


def test_openhands_report_and_event_log_are_read_back(tmp_path: Path) -> None:
    empty = OPENHANDS.report(tmp_path)  # the agent left nothing (killed, or never started)
    assert (empty.version, empty.iterations, empty.events) == (None, None, [])
    report = {
        "version": "1.2",
        "stop_condition": "finished",
        "iterations": 4,
        "skills_loaded": ["s"],
    }
    (tmp_path / "openhands-report.json").write_text(json.dumps(report))
    (tmp_path / "events.jsonl").write_text('{"kind": "MessageEvent"}\n{"kind": "Act')
    got = OPENHANDS.report(tmp_path)
    assert (got.version, got.stop_condition, got.iterations) == ("1.2", "finished", 4)
    assert got.skills_loaded == ["s"] and got.error is None
    assert [orjson.loads(e) for e in got.events] == [
        {"kind": "MessageEvent"},
        {"unparsed": '{"kind": "Act'},
    ]


def test_codex_event_log_is_read_back(tmp_path: Path) -> None:
    events = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"type": "command_execution", "exit_code": 0}},
        {"type": "item.completed", "item": {"type": "reasoning", "text": "hm"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 3}},
    ]
    text = "\n".join(json.dumps(e) for e in events) + "\nnot json\n"
    (tmp_path / "agent.stdout").write_text(text)
    (tmp_path / "codex-version.txt").write_text("codex-cli 0.171.0\n")
    report = CODEX.report(tmp_path)
    assert report.skills_loaded == []
    (tmp_path / "codex-skills.txt").write_text("zeta\nalpha\n")
    assert CODEX.report(tmp_path).skills_loaded == ["alpha", "zeta"]
    assert (report.version, report.stop_condition, report.iterations) == ("0.171.0", "finished", 2)
    assert orjson.loads(report.events[-1]) == {"unparsed": "not json"}
    failed = [*events[:3], {"type": "turn.failed", "error": {"message": "stream closed\nmore"}}]
    (tmp_path / "agent.stdout").write_text("\n".join(json.dumps(e) for e in failed))
    report = CODEX.report(tmp_path)
    assert report.stop_condition == "error" and report.error == "stream closed"


def test_in_container_driver_runs_phases_and_the_agent_command(tmp_path: Path) -> None:
    """agent_main.py as the container runs it: setup, the agent's command, evaluate."""
    ws, out = tmp_path / "ws", tmp_path / "out"
    ws.mkdir()
    (tmp_path / "setup.sh").write_text("echo set > marker\necho setup-said >&2\n")
    (tmp_path / "evaluate.sh").write_text("grep -q agent-ran marker\n")
    settings = {
        "workspace": str(ws),
        "out_dir": str(out),
        "setup_script": str(tmp_path / "setup.sh"),
        "evaluate_script": str(tmp_path / "evaluate.sh"),
        "launch": {
            "argv": [
                sys.executable,
                "-c",
                "import os,sys;open('marker','a').write(os.environ['X']);print('hi');"
                "print('agent-said', file=sys.stderr)",
            ],
            "env": {"X": "agent-ran"},
        },
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    assert agent_main.main(["agent_main.py", str(tmp_path / "settings.json")]) == 0
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["exit_codes"] == {"setup": 0, "agent": 0, "evaluate": 0}
    # a script's stderr is in its log; the agent's is on the container's, not in agent.stdout
    assert (out / "agent.stdout").read_text() == "hi\n"
    assert (out / "setup.log").read_text() == "setup-said\n"
    settings["launch"] = {"argv": ["/no/such/agent"], "env": {}}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    agent_main.main(["agent_main.py", str(tmp_path / "settings.json")])
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["exit_codes"] == {"setup": 0, "agent": 127, "evaluate": 1}


def test_cli_refuses_an_unknown_agent_in_one_line(tmp_path: Path) -> None:
    from tests.helpers import cli

    proc = cli("run", "--served-model-name", "m", "--agent", "nope", "--log-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "contagent: error: --agent 'nope' is not a known agent "
        "(known: claude-code, codex, mini-swe-agent, openhands, oracle)"
    )
    proc = cli("build", "--agent", "codex", "--agent", "openhands", "--tag", "x")
    assert proc.returncode == 2 and "--tag names one image" in proc.stderr


def test_an_agent_that_exits_non_zero_is_an_agent_error() -> None:
    from contagent.runner.tasks.seed_rollout import _verdict

    codes = {"exit_codes": {"setup": 0, "agent": 127, "evaluate": 1}}
    assert _verdict(codes, False, None, 0) == ("agent_error", "the agent exited 127")
    said = {**codes, "agent_error": "RuntimeError: no model"}
    assert _verdict(said, False, None, 0) == ("agent_error", "RuntimeError: no model")
    ok = {"exit_codes": {"setup": 0, "agent": 0, "evaluate": 0}}
    assert _verdict(ok, False, None, 0) == ("passed", None)


def test_plans_name_rollouts_by_agent_only_when_there_are_several(tmp_path: Path) -> None:
    from contagent.runner.run import plan_rollouts
    from contagent.runner.tasks.experiment import discover_experiments
    from tests.helpers import REPO

    experiments, problems = discover_experiments(REPO / "experiments", ["exp_001"], REPO / "skills")
    assert problems == []
    one = plan_rollouts(_run_config(tmp_path, repeat=2), experiments)
    assert [(p.name, p.agent) for p in one] == [
        ("exp_001", "openhands"),
        ("exp_001_r1", "openhands"),
    ]
    several = _run_config(tmp_path, agents=("codex", "mini-swe-agent"))
    assert [p.name for p in plan_rollouts(several, experiments)] == [
        "exp_001__codex",
        "exp_001__mini-swe-agent",
    ]


def _stub_request(path: str, body: dict[str, object] | None) -> StubRequest:
    return StubRequest(0, "POST" if body else "GET", path, {}, b"", body)


def test_the_one_player_answers_each_agent_in_its_own_shape() -> None:
    secret = "s-" + "0" * 24
    play = any_agent()
    chat = {"messages": [{"role": "tool", "content": f"{secret}\n"}]}
    openhands = play(_stub_request("/r/x/v1/chat/completions", chat))
    only_bash = [{"type": "function", "function": {"name": "bash"}}]
    mini = play(_stub_request("/r/x/v1/chat/completions", {**chat, "tools": only_bash}))
    item = {"type": "function_call_output", "output": secret}
    codex = play(_stub_request("/r/x/v1/responses?x=1", {"input": [item]}))
    block = {"type": "tool_result", "tool_use_id": "t", "content": secret, "is_error": False}
    blocks = {"messages": [{"role": "user", "content": [block]}]}
    claude = play(_stub_request("/r/x/v1/messages?beta=true", blocks))
    moves = (openhands, mini, codex, claude)
    names = [r.tool_calls[0].name if r.tool_calls else None for r in moves]
    assert names == ["terminal", "bash", "exec_command", "Bash"]
    assert all(f"pass:{secret}" in r.tool_calls[0].arguments_json for r in moves)
    requests = [
        _stub_request("/r/x/v1/models", None),
        _stub_request("/r/x/v1/responses", {"input": [item]}),
        _stub_request("/r/x/v1/messages", {"messages": [{"role": "user", "content": [
            {**block, "content": [{"type": "text", "text": "s-" + "1" * 24}]}]}]}),
    ]  # fmt: skip
    assert seen_secrets(requests) == {secret, "s-" + "1" * 24}


def test_an_agent_log_is_read_up_to_its_bound_only(tmp_path: Path, monkeypatch: Any) -> None:
    from contagent.agents import _util

    monkeypatch.setattr(_util, "LOG_LIMIT_BYTES", 20)
    log = tmp_path / "events.jsonl"
    log.write_bytes(b'{"n": 1}\n{"n": 2}\n{"n": 3}\n' * 1000)
    lines = _util.jsonl_objects(log)
    assert lines == [b'{"n":1}', b'{"n":2}', b'{"unparsed":"{\\""}']  # cut at byte 20


def test_every_agent_module_names_the_image_and_dockerfile_the_image_script_builds() -> None:
    """scripts/build-images.sh builds docker/agents/<agent>.Dockerfile as
    contagent-runner-<agent>:latest, and OpenHands from docker/Dockerfile."""
    docker_dir = REPO / "docker"
    script_agents = {
        p.name.removesuffix(".Dockerfile") for p in docker_dir.glob("agents/*.Dockerfile")
    }
    with_image = {name: agent for name, agent in AGENTS.items() if agent.image}
    assert set(AGENTS) - set(with_image) == {"oracle"}  # it runs with what the task image has
    assert set(with_image) == script_agents | {"openhands"}
    for name, agent in with_image.items():
        assert (docker_dir / agent.dockerfile).is_file(), name
        if name == "openhands":
            assert (agent.dockerfile, agent.image) == ("Dockerfile", "contagent-runner:latest")
        else:
            assert agent.dockerfile == f"agents/{name}.Dockerfile"
            assert agent.image == f"contagent-runner-{name}:latest"

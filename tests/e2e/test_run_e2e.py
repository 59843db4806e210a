"""`contagent run` end to end: real engine, real image, real OpenHands agent, scripted LLM."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import read_log_bytes
from contagent.testing.llm_stub import Reply, RunningStub, Script
from tests.e2e.helpers import (
    SECRET,
    chat_requests,
    copy_experiment,
    secret_player,
    tool_outputs,
)
from tests.helpers import cli
from tools.schema_gen import SCHEMA_DIR

pytestmark = pytest.mark.docker

StubFactory = Callable[[Script], RunningStub]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file, or of a raw log in either form."""
    return [orjson.loads(line) for line in read_log_bytes(path).splitlines() if line.strip()]


def test_exp_001_passes_records_exports_and_validates(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any]
) -> None:
    stub = stub_factory(secret_player())
    summary = run(stub)
    assert summary.ok and not summary.problems
    [result] = summary.results
    assert result.status == "passed", result.error
    assert result.passed is True and result.reward == 1.0
    assert result.stop_condition == "finished"
    assert result.exit_codes is not None
    assert (result.exit_codes.setup, result.exit_codes.agent, result.exit_codes.evaluate) == (
        0,
        0,
        0,
    )
    assert result.iterations == 3
    assert result.skills_loaded == ["linux-networking"]

    # The agent saw the secret that setup.sh wrote, through the real terminal tool.
    secrets = {
        m.group(0)
        for r in chat_requests(stub)
        for out in tool_outputs(r)
        if (m := SECRET.search(out))
    }
    assert len(secrets) == 1

    paths = RunPaths(tmp_path / "logs")
    rollout = paths.rollout("exp_001")
    # the runner compacted the ended rollout's log, and every reader takes that form
    assert rollout.raw_log == rollout.compacted and not rollout.exchanges.exists()
    assert not rollout.compacting.exists()
    records = read_jsonl(rollout.raw_log)
    requests = [r for r in records if r["type"] == "request"]
    outcomes = [r for r in records if r["type"] == "outcome"]
    assert [r["index"] for r in requests] == [0, 1, 2] == [o["index"] for o in outcomes]
    assert all(o["outcome"] == "completed" for o in outcomes)
    assert len(chat_requests(stub)) == 3  # every request the model saw went through the proxy

    # result.json: valid against its schema, tokens from the raw log, settings deliberate.
    on_disk = json.loads(rollout.result.read_text())
    jsonschema.validate(
        on_disk, json.loads((SCHEMA_DIR / "rollout-result.schema.json").read_text())
    )
    assert RolloutResult.model_validate(on_disk) == result
    assert result.tokens is not None
    assert result.tokens.exchanges == 3 and result.tokens.with_usage == 3
    assert result.tokens.total_tokens == sum(o["usage"]["total_tokens"] for o in outcomes)
    assert result.llm is not None and result.llm.base_url.endswith("/r/exp_001/v1")
    assert result.wire_params is not None
    assert result.wire_params["temperature"] == 0.3  # not dropped by the SDK
    assert "reasoning_effort" not in result.wire_params  # not the SDK's default "high"
    assert result.wire_params["model"] == "stub-model"
    assert result.timings is not None and result.timings.overhead_s is not None
    assert 0 < result.timings.overhead_s < result.timings.wall_s

    # The log files users of this layout expect.
    events = read_jsonl(paths.log("exp_001"))
    assert len(events) >= 7 and all("id" in e and "source" in e for e in events)
    assert any(e.get("tool_name") == "finish" for e in events)
    result_text = paths.result_text("exp_001").read_text()
    assert "PASS: result.txt matches" in result_text and "verdict: passed" in result_text
    assert paths.err("exp_001").is_file()

    # What was recorded exports and validates.
    out = tmp_path / "export"
    proc = cli("export", str(paths.rollouts_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    [row] = read_jsonl(out / "results.jsonl")
    assert (
        row["rollout_id"] == "exp_001" and row["training_ready"] is True and row["passed"] is True
    )
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # --resume skips the finished rollout; without it the log dir is not overwritten.
    again = run(stub, resume=True)
    assert again.results == [] and [r.rollout_id for r in again.resumed] == ["exp_001"]
    from contagent.errors import ContagentError

    with pytest.raises(ContagentError, match="pass --resume"):
        run(stub)
    assert len(chat_requests(stub)) == 3


def test_wrong_answer_fails(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any]
) -> None:
    stub = stub_factory(secret_player(answer="pass:not-the-secret"))
    [result] = run(stub).results
    assert result.status == "failed" and result.passed is False and result.reward == 0.0
    assert result.exit_codes is not None and result.exit_codes.evaluate == 1
    text = RunPaths(tmp_path / "logs").result_text("exp_001").read_text()
    assert "FAIL: expected" in text and "pass:not-the-secret" in text and "verdict: failed" in text


def test_timeout_is_stopped_and_recorded(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any]
) -> None:
    stub = stub_factory(lambda req: Reply(content="too slow", delay=120))
    t0 = time.monotonic()
    [result] = run(stub, timeout_s=20).results
    assert time.monotonic() - t0 < 90
    assert result.status == "timeout" and result.stop_condition == "timeout"
    assert (
        result.exit_codes is not None
        and result.exit_codes.setup == 0
        and result.exit_codes.evaluate is None
    )
    records = read_jsonl(RunPaths(tmp_path / "logs").rollout("exp_001").raw_log)
    outcomes = [r for r in records if r["type"] == "outcome"]
    assert records[0]["type"] == "request"
    assert outcomes and outcomes[0]["outcome"] == "abandoned"  # the killed agent's call, recorded


def test_agent_error_when_the_llm_refuses(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any]
) -> None:
    from contagent.testing.llm_stub import Error

    stub = stub_factory(
        lambda req: Error(
            400, {"error": {"message": "bad request", "type": "invalid_request_error"}}
        )
    )
    [result] = run(stub).results
    assert result.status == "agent_error", result
    assert "BadRequestError" in (result.error or ""), result.error
    assert result.exit_codes is not None and result.exit_codes.agent == 1


def test_service_reachable_by_name_and_llm_only_through_proxy(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any], docker_client: Any
) -> None:
    from tests.e2e.helpers import BASE_IMAGE, FINISH, terminal

    image = "contagent-test-web:latest"
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL contagent.test=web\n")
    docker_client.images.build(path=str(tmp_path / "img"), tag=image, rm=True)

    exps = tmp_path / "exps"
    exp = exps / "svc"
    (exp / "workspace").mkdir(parents=True)
    (exp / "experiment.json").write_text(json.dumps({
        "task": "Fetch http://web:8080/token.txt and write its content to ~/workspace/result.txt.",
        "services": [{"name": "web", "image": image, "entrypoint_script": "web_entrypoint.sh",
                      "environment": {"TOKEN": "tok-42"}}],
        "cap_add": ["NET_ADMIN"],  # and no skills, though the skills dir holds one
    }))  # fmt: skip
    (exp / "web_entrypoint.sh").write_text(
        'mkdir -p /srv && printf "%s" "$TOKEN" > /srv/token.txt\n'
        "exec python3 -m http.server 8080 --directory /srv\n"
    )
    (exp / "setup.sh").write_text(
        "for i in $(seq 50); do curl -sf http://web:8080/token.txt >/dev/null && exit 0; sleep 0.2; done; exit 1\n"
    )
    (exp / "evaluate.sh").write_text(
        '[ "$(cat ~/workspace/result.txt)" = "$(curl -sf http://web:8080/token.txt)" ]\n'
    )

    stub_port: list[int] = []
    probe = (
        'python3 -c "import socket,struct;'
        "gw=[l.split()[2] for l in open('/proc/net/route') if l.split()[1]=='00000000'][0];"
        "ip=socket.inet_ntoa(struct.pack('<L',int(gw,16)));s=socket.socket();s.settimeout(3);"
        "print('DIRECT', 'CONNECTED' if s.connect_ex((ip,{port}))==0 else 'BLOCKED')\""
    )

    def play(req: Any) -> Reply:
        outputs = tool_outputs(req)
        if not outputs:
            return terminal(
                "curl -s http://web:8080/token.txt > ~/workspace/result.txt; cat ~/workspace/result.txt"
            )
        if len(outputs) == 1:
            return terminal(probe.format(port=stub_port[0]))
        if len(outputs) == 2:
            return terminal(inside)
        return FINISH

    # what the runner container was given: capabilities, skills, mounts, the Docker socket
    inside = (
        'python3 -c "import os;'
        "print('SOCK', os.path.exists('/var/run/docker.sock'));"
        "print('CAPEFF', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]);"
        "d='/contagent/skills';print('SKILLS', sorted(os.listdir(d)) if os.path.isdir(d) else []);"
        "print('MOUNTS', sorted({l.split()[4] for l in open('/proc/self/mountinfo')"
        " if not l.split()[4].startswith(('/proc', '/sys', '/dev'))}))\""
    )
    stub = stub_factory(play)
    stub_port.append(int(stub.url.rsplit(":", 1)[1]))
    try:
        [result] = run(stub, experiments_dir=exps).results
    finally:
        docker_client.images.remove(image, force=True)
    assert result.status == "passed", (
        result.error,
        RunPaths(tmp_path / "logs").result_text("svc").read_text(),
    )
    outputs = tool_outputs(chat_requests(stub)[-1])
    assert "tok-42" in outputs[0]
    # The LLM server listens on the host; from the rollout network it is not reachable directly.
    assert "DIRECT BLOCKED" in outputs[1]
    seen = dict(line.split(" ", 1) for line in outputs[2].splitlines() if " " in line)
    assert seen["SOCK"] == "False"  # no Docker socket
    assert int(seen["CAPEFF"], 16) >> 12 & 1  # CAP_NET_ADMIN (bit 12), as cap_add asked
    assert seen["SKILLS"] == "[]"  # only the skills the experiment lists
    # nothing of the host's mounted in: only what Docker itself provides
    mounts = set(ast.literal_eval(seen["MOUNTS"]))
    docker_own = {"/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/usr/sbin/docker-init"}
    assert mounts <= docker_own, mounts


def test_malformed_experiment_is_reported_and_others_run_in_parallel(
    tmp_path: Path, stub_factory: StubFactory, run_id: str, owner: str
) -> None:
    exps = tmp_path / "exps"
    copy_experiment("exp_001", exps)
    bad = exps / "broken"
    bad.mkdir()
    (bad / "experiment.json").write_text('{"task": "x", "services": [{"name": "db"}]}')
    stub = stub_factory(secret_player())
    proc = cli(
        "run", "--served-model-name", "stub-model", "--vllm-url", stub.url + "/v1",
        "--experiments-dir", str(exps), "--skills-dir", "skills", "--log-dir", str(tmp_path / "logs"),
        "--jobs", "2", "--repeat", "2", "--run-id", run_id, "--timeout", "300",
        "--temperature", "0.5", "--top-p", "0.9", "--reasoning-effort", "low", "--extra-body", '{"top_k": 20}',
        env={"CONTAGENT_OWNER": owner}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # a skipped experiment makes the run non-zero
    flat = " ".join(proc.stderr.split())
    assert "broken/experiment.json: $.services[0]: 'image' is a required property" in flat
    assert "Traceback" not in proc.stderr
    paths = RunPaths(tmp_path / "logs")
    for name in ("exp_001", "exp_001_r1"):
        result = RolloutResult.model_validate_json(paths.rollout(name).result.read_bytes())
        assert result.status == "passed", result.error
        assert name in flat  # in the summary table
        # The sampling settings asked for are the ones on the wire, each request.
        assert result.wire_params is not None
        assert {
            k: result.wire_params.get(k)
            for k in ("temperature", "top_p", "reasoning_effort", "top_k")
        } == {"temperature": 0.5, "top_p": 0.9, "reasoning_effort": "low", "top_k": 20}
    for req in chat_requests(stub):
        assert (
            req.json["temperature"],
            req.json["top_p"],
            req.json["reasoning_effort"],
            req.json["top_k"],
        ) == (0.5, 0.9, "low", 20)
    assert "passed 2/2" in flat
    assert not paths.rollout("broken").root.exists()
    assert len(chat_requests(stub)) == 6


def test_ctrl_c_removes_everything(tmp_path: Path, stub_factory: StubFactory, run_id: str, owner: str,
                                   docker_client: Any) -> None:  # fmt: skip
    import signal
    import subprocess
    import sys

    from contagent.runner import docker_ops

    stub = stub_factory(lambda req: Reply(content="slow", delay=120))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from contagent.cli import main; main()", "run", "--served-model-name", "stub-model",
         "--vllm-url", stub.url, "--experiment", "exp_001", "--log-dir", str(tmp_path / "logs"),
         "--run-id", run_id],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**__import__("os").environ, "CONTAGENT_OWNER": owner},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not chat_requests(stub):
        time.sleep(0.5)
    assert chat_requests(stub), "the agent never called the LLM"
    assert docker_ops.leftovers(docker_client, {docker_ops.LABEL_RUN: run_id})  # it is running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert docker_ops.leftovers(docker_client, {docker_ops.LABEL_RUN: run_id}) == []


def test_gc_removes_only_this_owners_leftovers(docker_client: Any, run_id: str, owner: str) -> None:
    from contagent.runner import docker_ops
    from contagent.runner.stopping.leftovers import LABEL_HOST, LABEL_PID, LABEL_STARTED
    from tests.e2e.helpers import BASE_IMAGE

    # made by a driver on this host that is gone (no process has that start time)
    dead = {LABEL_HOST: __import__("socket").gethostname(), LABEL_PID: "1", LABEL_STARTED: "1.00"}
    mine = {docker_ops.LABEL_RUN: run_id, docker_ops.LABEL_OWNER: owner, **dead}
    theirs = {**mine, docker_ops.LABEL_OWNER: owner + "-someone-else"}
    for labels, tag in ((mine, "mine"), (theirs, "theirs")):
        net = docker_client.networks.create(f"{run_id}-{tag}", internal=True, labels=labels)
        docker_client.containers.run(BASE_IMAGE, ["sleep", "300"], detach=True, labels=labels,
                                     network=net.name, name=f"{run_id}-{tag}")  # fmt: skip
    proc = cli("gc", "--owner", owner)
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 containers, 1 networks" in proc.stderr
    assert docker_ops.leftovers(docker_client, mine) == []
    assert sorted(docker_ops.leftovers(docker_client, theirs)) == [
        f"container {run_id}-theirs",
        f"network {run_id}-theirs",
    ]
    docker_ops.remove_labelled(docker_client, theirs)


def test_missing_service_image_is_an_infra_error_and_leaves_nothing(
    tmp_path: Path, stub_factory: StubFactory, run: Callable[..., Any]
) -> None:
    exps = tmp_path / "exps"
    exp = copy_experiment("exp_001", exps)
    spec = json.loads((exp / "experiment.json").read_text())
    # A registry on a closed loopback port: the pull fails at once, nothing leaves the machine.
    spec["services"] = [{"name": "db", "image": "127.0.0.1:9/contagent-missing:1"}]
    (exp / "experiment.json").write_text(json.dumps(spec))
    stub = stub_factory(secret_player())
    summary = run(stub, experiments_dir=exps)
    [result] = summary.results
    assert result.status == "infra_error" and not summary.ok
    assert result.error and "127.0.0.1:9/contagent-missing" in result.error
    assert chat_requests(stub) == []
    assert "verdict: infra_error" in RunPaths(tmp_path / "logs").result_text("exp_001").read_text()


def test_foreign_image_is_refused_in_one_line(tmp_path: Path, run_id: str) -> None:
    from tests.e2e.helpers import BASE_IMAGE

    proc = cli("run", "--served-model-name", "m", "--vllm-url", "http://127.0.0.1:9/v1",
               "--openhands-image", BASE_IMAGE, "--log-dir", str(tmp_path / "logs"), "--run-id", run_id)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"contagent: error: --image openhands={BASE_IMAGE} is not a contagent runner image "
        "(no contagent.runner-image label); build one with `contagent build --agent openhands`"
    )

"""Options of `contagent run`/`gc`/`build`, and the runner's pure helpers (no Docker engine needed)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.records import outcome_record, request_record
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import LlmOptions, RunConfig, rollout_name, upstream_base
from contagent.runner.lifecycle.rollout import RolloutPlan, token_totals
from contagent.runner.run import prepare_rollouts
from contagent.runner.tasks.experiment import load_experiment
from contagent.runner.tasks.seed_rollout import _verdict
from contagent.versions import NewerVersionError
from tests.helpers import cli
from tests.runner.helpers import write_experiment


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be 1 or more"),
        (["--repeat", "0"], "--repeat must be 1 or more"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--max-iterations", "0"], "--max-iterations must be 1 or more"),
        (["--temperature", "3"], "--temperature must be between 0 and 2"),
        (["--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--extra-body", "{bad"], "--extra-body is not valid JSON"),
        (["--extra-body", "[1]"], "--extra-body must be a JSON object"),
        (["--extra-body", '{"messages": []}'], "--extra-body must not set messages"),
        (["--vllm-url", "localhost:8000"], "is not an http(s) URL"),
        (["--run-id", "../x"], "is not a safe name"),
        (["--vllm-ca", "/nonexistent/ca.pem"], "--vllm-ca only applies to an https://"),
        (["--vllm-url", "https://h/v1", "--vllm-ca", "/nonexistent/ca.pem"], "No such file"),
        (["--experiments-dir", "/nonexistent/exps"], "experiments directory not found"),
        (["--experiment", "../etc"], "not a safe single path segment"),
        (["--image", "codex"], "--image 'codex' is not AGENT=NAME"),
        (["--image", "nope=x"], "--image 'nope=x': 'nope' is not a known agent"),
        (["--image", "openhands=a", "--openhands-image", "b"], "two images for openhands: a, b"),
    ],
)
def test_bad_options_give_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "exps").mkdir()
    proc = cli("run", "--served-model-name", "m", "--experiments-dir", str(tmp_path / "exps"),
                     "--log-dir", str(tmp_path / "logs"), *args)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("contagent: error: "), proc.stderr
    assert message in lines[-1]
    assert "Traceback" not in proc.stderr


COMPAT = ("--network", "--vllm-internal-url", "--entrypoint-script", "--agent-server-image-repo",
          "--agent-server-image-tag")  # fmt: skip


def test_help_lists_the_compatibility_options_together_once() -> None:
    proc = cli("run", "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for option in ("--vllm-url", "--served-model-name", "--api-key", "--image", "--openhands-image",
                   "--experiments-dir", "--experiment", "--log-dir", "--skills-dir", "--jobs",
                   "--repeat", "--timeout", "--max-iterations", "--temperature", "--top-p",
                   "--reasoning-effort", "--extra-body", "--resume"):  # fmt: skip
        assert option in text
    panel = proc.stdout.split("Compatibility options")
    assert len(panel) == 2, "one panel"
    for option in COMPAT:
        assert f" {option} " in panel[1] and f" {option} " not in panel[0]
        assert proc.stdout.count(f" {option} ") == 1


def test_the_seed_pipelines_options_are_accepted_with_why_they_are_not_needed(
    tmp_path: Path,
) -> None:
    values = [arg for option in COMPAT for arg in (option, "x")]
    proc = cli("run", "--served-model-name", "m", "--jobs", "0", *values)
    assert proc.returncode == 2, proc.stderr  # --jobs 0: the options themselves were accepted
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert [n.split()[1] for n in notes] == list(COMPAT)
    assert all("is not needed: " in n and n.endswith("; ignored") for n in notes)
    assert "No such option" not in proc.stderr
    assert "--jobs must be 1 or more" in proc.stderr


def test_all_experiments_bad_exits_1_and_reports(tmp_path: Path) -> None:
    write_experiment(tmp_path / "exps", "broken", None, raw='{"task": 1}')
    proc = cli("run", "--served-model-name", "m", "--experiments-dir", str(tmp_path / "exps"),
                     "--log-dir", str(tmp_path / "logs"), "--network", "contagent-net")  # fmt: skip
    assert proc.returncode == 1
    assert "note: --network is not needed: each rollout gets its own isolated network" in (
        " ".join(proc.stderr.split())
    )
    assert "broken/experiment.json: $.task: 1 is not of type 'string'" in " ".join(
        proc.stderr.split()
    )


def test_upstream_base_accepts_both_forms() -> None:
    assert upstream_base("http://h:8000/v1/") == "http://h:8000"
    assert upstream_base("http://h:8000") == "http://h:8000"
    with pytest.raises(ContagentError):
        upstream_base("ftp://h")


def test_rollout_names_and_paths(tmp_path: Path) -> None:
    assert rollout_name("exp_001", 0) == "exp_001"
    assert rollout_name("exp_001", 2) == "exp_001_r2"
    paths = RunPaths(tmp_path)
    assert paths.log("a") == tmp_path / "a.log"
    assert paths.rollout("a").exchanges == tmp_path / "rollouts" / "a" / "exchanges.jsonl"
    with pytest.raises(ContagentError):
        paths.err("../a")


def test_token_totals_and_wire_params(tmp_path: Path) -> None:
    log = tmp_path / "exchanges.jsonl"

    def request(index: int, body: dict) -> dict:
        return request_record(index=index, rollout_id="r", time=0.0, method="POST",
                              path="/v1/chat/completions", headers={}, body=body, body_text=None,
                              body_sha256="", body_bytes=0, stream=False, upstream_changes=[])  # fmt: skip

    def outcome(index: int, usage: dict | None) -> dict:
        return outcome_record(index=index, rollout_id="r", outcome="completed", status=200,
                              client_status=200, started=0.0, first_byte=0.0, ended=0.0,
                              usage=usage)  # fmt: skip

    lines = [
        request(0, {"model": "m", "messages": [], "tools": [], "temperature": 0.2}),
        outcome(0, {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
        request(1, {"model": "m", "messages": []}),
        outcome(1, None),
        # counted as the exporter counts them: a missing total is the sum, Responses names too
        request(2, {"model": "m", "messages": []}),
        outcome(2, {"prompt_tokens": 5, "completion_tokens": 1}),
        request(3, {"model": "m", "messages": []}),
        outcome(3, {"input_tokens": 7, "output_tokens": 3}),
    ]
    log.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b'\n{"torn')
    totals, wire = token_totals(log)
    assert (totals.exchanges, totals.with_usage, totals.total_tokens) == (4, 3, 28)
    assert (totals.prompt_tokens, totals.completion_tokens) == (22, 6)
    assert wire == {"model": "m", "temperature": 0.2}
    assert token_totals(tmp_path / "none.jsonl")[0].exchanges == 0


@pytest.mark.parametrize(
    ("outcome", "timed_out", "cancelled", "status"),
    [
        ({"exit_codes": {"setup": 0, "agent": 0, "evaluate": 0}}, False, None, "passed"),
        ({"exit_codes": {"setup": 0, "agent": 0, "evaluate": 1}}, False, None, "failed"),
        ({"exit_codes": {"setup": 0, "agent": 1, "evaluate": 0}}, False, None, "agent_error"),
        # any non-zero exit of the agent's own process (a CLI agent's usage error, a crash)
        ({"exit_codes": {"setup": 0, "agent": 2, "evaluate": 0}}, False, None, "agent_error"),
        ({"exit_codes": {"setup": 2}}, False, None, "infra_error"),
        ({}, False, None, "infra_error"),
        ({"exit_codes": {"setup": 0, "agent": 0}}, True, None, "timeout"),
        (
            {"exit_codes": {"setup": 0, "agent": 0, "evaluate": 0}},
            False,
            "interrupted",
            "infra_error",
        ),
    ],
)
def test_verdicts(outcome: dict, timed_out: bool, cancelled: str | None, status: str) -> None:
    verdict, error = _verdict(outcome, timed_out, cancelled, 0)
    assert verdict == status
    if cancelled is not None:
        assert error == cancelled  # the reason the run gave for stopping it
    if verdict == "agent_error":
        assert error == f"the agent exited {outcome['exit_codes']['agent']}"


def test_rollout_ids_that_would_collide_are_refused(tmp_path: Path) -> None:
    a = load_experiment(write_experiment(tmp_path / "exps", "a", {"task": "t"}), None)
    a_r1 = load_experiment(write_experiment(tmp_path / "exps", "a_r1", {"task": "t"}), None)
    plans = [RolloutPlan(a, 0), RolloutPlan(a, 1), RolloutPlan(a_r1, 0)]
    with pytest.raises(ContagentError, match="'a_r1' would name two rollouts"):
        prepare_rollouts(RunPaths(tmp_path / "logs"), plans, resume=False)
    assert not (tmp_path / "logs").exists()  # refused before anything was made


def test_existing_rollouts_need_resume_and_resume_skips_finished(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    plans = [RolloutPlan(exp, 0), RolloutPlan(exp, 1)]
    paths = RunPaths(tmp_path / "logs")
    done = paths.rollout("e")
    done.root.mkdir(parents=True)
    done.result.write_text(RolloutResult(rollout_id="e", status="passed").model_dump_json())
    unfinished = paths.rollout("e_r1")
    unfinished.root.mkdir(parents=True)
    unfinished.exchanges.write_text("{}\n")
    unfinished.result.write_text(json.dumps({"rollout_id": "e_r1", "status": "infra_error"}))
    with pytest.raises(ContagentError, match="pass --resume"):
        prepare_rollouts(paths, plans, resume=False)
    todo, finished = prepare_rollouts(paths, plans, resume=True)
    assert [p.name for p in todo] == ["e_r1"]
    assert [r.rollout_id for r in finished] == ["e"]
    assert not unfinished.root.exists()
    moved = list(paths.superseded_dir.glob("e_r1-*/e_r1/exchanges.jsonl"))
    assert len(moved) == 1  # moved aside, never deleted


def test_resume_refuses_a_newer_result_instead_of_running_it_again(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    paths = RunPaths(tmp_path / "logs")
    newer = paths.rollout("e")
    newer.root.mkdir(parents=True)
    newer.exchanges.write_text("{}\n")
    newer.result.write_text(json.dumps({"schema_version": 99, "rollout_id": "e", "status": "x"}))
    with pytest.raises(NewerVersionError) as caught:
        prepare_rollouts(paths, [RolloutPlan(exp, 0)], resume=True)
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert "schema_version 99 is newer" in str(caught.value)
    assert newer.result.exists() and not paths.superseded_dir.exists()  # nothing moved aside


def test_resume_runs_again_a_result_it_cannot_read(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path / "exps", "e", {"task": "t"}), None)
    paths = RunPaths(tmp_path / "logs")
    torn = paths.rollout("e")
    torn.root.mkdir(parents=True)
    torn.result.write_text('{"rollout_id": "e", "status": "pass')
    todo, finished = prepare_rollouts(paths, [RolloutPlan(exp, 0)], resume=True)
    assert [p.name for p in todo] == ["e"] and finished == []


def test_newer_experiment_json_is_a_one_line_error(tmp_path: Path) -> None:
    root = write_experiment(tmp_path / "exps", "e", {"task": "t", "schema_version": 2})
    with pytest.raises(NewerVersionError, match=r"experiment\.json: schema_version 2 is newer"):
        load_experiment(root, None)


def test_run_config_rejects_bad_values(tmp_path: Path) -> None:
    llm = LlmOptions(served_model_name="m")
    with pytest.raises(ContagentError):
        RunConfig(
            experiments_dir=tmp_path, log_dir=tmp_path, upstream_url="http://x", llm=llm, jobs=0
        )
    with pytest.raises(ContagentError):
        LlmOptions(served_model_name=" ")


def test_build_refuses_a_missing_ca_bundle(tmp_path: Path) -> None:
    proc = cli("build", "--ca-bundle", str(tmp_path / "nope.crt"))
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"contagent: error: --ca-bundle {tmp_path / 'nope.crt'}: no such file"
    )


def test_vllm_compose_file_keeps_the_server_off_the_rollout_networks() -> None:
    import yaml

    compose = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "docker" / "compose.vllm.yml").read_text()
    )
    vllm = compose["services"]["vllm"]
    # Published on loopback only: rollout containers can reach the host's other addresses.
    assert vllm["ports"] and all(str(p).startswith("127.0.0.1:") for p in vllm["ports"])
    assert compose["networks"]["contagent-net"]["name"] == "contagent-net"
    assert "contagent-net" in vllm["networks"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert any(arg.startswith("--served-model-name=") for arg in vllm["command"])

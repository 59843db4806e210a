"""Harbor task folders: what maps, what is refused (judged by value), rewards, discovery."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contagent.errors import ContagentError
from contagent.runner.images.agent_image import derived_dockerfile
from contagent.runner.tasks.harbor_reward import parse_reward
from contagent.runner.tasks.harbor_task import (
    environment_hash,
    expand_env,
    load_harbor_task,
)
from contagent.runner.tasks.kinds import agent_problems, discover_tasks, internet_note
from tests.harbor.helpers import TASKS, write_task

REPO = Path(__file__).resolve().parents[2]


def test_the_dockerfile_fixture_maps_every_field() -> None:
    task = load_harbor_task(TASKS / "hello-dockerfile")
    assert task.name == "hello-dockerfile" and task.kind == "harbor"
    assert task.spec.task.startswith("Create the file /app/hello.txt")
    assert task.docker_image is None and len(task.environment_hash) == 64
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.build_timeout_s) == (300, 120, 300)
    assert (task.cpus, task.memory_mb, task.storage_mb) == (1, 1024, None)
    assert task.verifier_env == {"GREETING": "hello harbor"}
    assert task.healthcheck is not None and task.healthcheck.command == "test -f /app/ready"
    assert task.healthcheck.retries == 5 and task.healthcheck.interval_s == 0.5
    assert (task.agent_network, task.verifier_network) == ("public", "public")
    assert task.has_solution and task.wants_internet
    assert task.skills_path == "/opt/task-skills"


def test_the_skills_in_the_task_image_go_to_agents_that_honour_skills() -> None:
    from contagent.agents import AGENTS, unhonoured

    task = load_harbor_task(TASKS / "hello-dockerfile")
    assert task.skills_wanted == ("every skill in the task image's /opt/task-skills",)
    assert unhonoured(AGENTS["codex"], task.skills_wanted, {}) is None
    # as for a seed experiment's skills: the run says in one line it runs without them
    assert unhonoured(AGENTS["mini-swe-agent"], task.skills_wanted, {}) == (
        "mini-swe-agent cannot honour skills (every skill in the task image's "
        "/opt/task-skills): it runs without them"
    )
    assert load_harbor_task(TASKS / "reward-json").skills_wanted == ()


def test_the_docker_image_fixture_maps_every_field() -> None:
    task = load_harbor_task(TASKS / "reward-json")
    assert task.docker_image == "contagent-base:trixie"
    assert task.workdir == "/work" and task.memory_mb == 512  # the deprecated `memory`
    assert task.env == {"TASK_MODE": "graded", "TASK_TOKEN": "none"}  # the default, not the host
    assert task.solution_env == {"ANSWER": "42"}
    # the deprecated allow_internet = false: no network in either phase
    assert (task.agent_network, task.verifier_network) == ("no-network", "no-network")
    assert not task.wants_internet


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[environment]\ngpus = 1\n", "gpus = 1"),
        ('[[environment.mcp_servers]]\nname = "m"\nurl = "http://x"\n', "mcp_servers"),
        ('[[steps]]\nname = "one"\n', "[[steps]]"),
        ('[environment]\nos = "windows"\n', "os = 'windows'"),
        ('[environment]\ntpu = { type = "v6e", topology = "2x2" }\n', "tpu"),
        ('[verifier]\nenvironment_mode = "separate"\n', "environment_mode"),
        ('[[verifier.collect]]\ncommand = "true"\n', "verifier.collect"),
        ('[environment]\nskills_dir = "skills"\n', "skills_dir 'skills' is not absolute"),
        ('artifacts = ["/app/out"]\n', "artifacts"),
        ('[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "allowlist"),
    ],
)
def test_an_unsupported_value_refuses_the_task_naming_its_field(
    tmp_path: Path, toml: str, field: str
) -> None:
    root = write_task(tmp_path / "t", toml)
    with pytest.raises(ContagentError) as info:
        load_harbor_task(root)
    message = str(info.value)
    assert field in message and "\n" not in message and "task.toml" in message


def test_defaults_harbor_fills_in_are_judged_by_value(tmp_path: Path) -> None:
    root = write_task(
        tmp_path / "t",
        "[environment]\ngpus = 0\nmcp_servers = []\ngpu_types = []\n[verifier]\n"
        'environment_mode = "shared"\ncollect = []\n',
    )
    assert load_harbor_task(root).name == "t"


def test_the_gpu_fixture_is_refused_among_valid_tasks_and_seed_experiments(tmp_path: Path) -> None:
    shutil.copytree(TASKS, tmp_path / "tasks")
    shutil.copytree(REPO / "experiments" / "exp_001", tmp_path / "tasks" / "exp_001")
    loaded, problems = discover_tasks(tmp_path / "tasks", None, REPO / "skills")
    assert sorted((t.name, t.kind) for t in loaded) == [
        ("exp_001", "seed"),
        ("hello-dockerfile", "harbor"),
        ("reward-json", "harbor"),
    ]
    (problem,) = problems
    assert (
        problem.name == "needs-gpu" and "[environment] gpus = 1 is not supported" in problem.message
    )


def test_the_oracle_refuses_tasks_without_a_solution() -> None:
    loaded, _ = discover_tasks(REPO / "experiments", None, REPO / "skills")
    (problem,) = agent_problems(loaded, ("oracle",))
    assert problem.name == "exp_001" and "solution/solve.sh" in problem.message
    assert agent_problems(loaded, ("codex",)) == []


def test_the_internet_note_counts_the_tasks_asking_and_says_what_they_get() -> None:
    tasks = [load_harbor_task(TASKS / n) for n in ("hello-dockerfile", "reward-json")]
    assert "1 task(s) ask for the internet; the agent phase stays isolated" in str(
        internet_note(tasks, allow_internet=False)
    )
    assert "--allow-internet gives the agent a route out" in str(internet_note(tasks, True))
    assert internet_note(tasks[1:], False) is None


def test_env_templates_read_only_the_host_variables_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOST_SECRET", "s3cret")
    values = {"A": "${HOST_SECRET}", "B": "${HOST_SECRET:-fallback}", "C": "plain ${X}"}
    with pytest.raises(ContagentError, match="pass --task-env HOST_SECRET"):
        expand_env(values, frozenset(), "env")
    got = expand_env({"B": values["B"], "C": values["C"]}, frozenset(), "env")
    assert got == {"B": "fallback", "C": "plain ${X}"}  # never the host's value
    assert expand_env(values, frozenset({"HOST_SECRET"}), "env")["A"] == "s3cret"
    monkeypatch.delenv("HOST_SECRET")
    with pytest.raises(ContagentError, match="HOST_SECRET is not set"):
        expand_env({"A": "${HOST_SECRET}"}, frozenset({"HOST_SECRET"}), "env")


def test_the_task_name_and_bad_input_give_one_line_errors(tmp_path: Path) -> None:
    root = write_task(tmp_path / "folder", '[task]\nname = "org/the-task"\n')
    assert load_harbor_task(root).name == "the-task"
    for toml, needle in (
        ("[environment\n", "invalid TOML"),
        ("[environment]\ncpus = -1\n", "cpus = -1.0 must be positive"),
        ("[environment]\nunknown_field = 1\n", "unknown_field"),
        ('[environment]\nworkdir = "relative"\n', "not absolute"),
        ('[environment]\nmemory = "lots"\n', "not a size"),
    ):
        (root / "task.toml").write_text(toml)
        with pytest.raises(ContagentError, match=needle) as info:
            load_harbor_task(root)
        assert "\n" not in str(info.value)
    (root / "task.toml").write_text("")
    (root / "tests" / "test.sh").unlink()
    with pytest.raises(ContagentError, match=r"test\.sh: missing"):
        load_harbor_task(root)


def test_the_environment_hash_follows_content_and_exec_bits(tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM x\n")
    first = environment_hash(env)
    assert environment_hash(env) == first
    (env / "Dockerfile").chmod(0o755)
    second = environment_hash(env)
    (env / "Dockerfile").write_text("FROM y\n")
    assert len({first, second, environment_hash(env)}) == 3


def test_rewards_are_read_as_harbor_reads_them(tmp_path: Path) -> None:
    d = tmp_path / "verifier"
    d.mkdir()
    assert parse_reward(d)[2] is not None  # no file: why
    (d / "reward.txt").write_text("0.25\n")
    assert parse_reward(d) == (0.25, {"reward": 0.25}, None)
    (d / "reward.json").write_text(json.dumps({"reward": 1, "style": 0.5}))
    assert parse_reward(d) == (1.0, {"reward": 1.0, "style": 0.5}, None)  # json wins
    for bad, why in (
        ({"style": 1}, "no 'reward' key"),
        ({"reward": "1"}, "not a number"),
        ({"reward": True}, "not a number"),
    ):
        (d / "reward.json").write_text(json.dumps(bad))
        assert why in str(parse_reward(d)[2])
    (d / "reward.json").write_text("NaN")
    assert parse_reward(d)[0] is None
    (d / "reward.json").unlink()
    (d / "reward.txt").write_text("one")
    assert "not one number" in str(parse_reward(d)[2])


def test_the_derived_image_copies_the_agent_and_checks_the_base() -> None:
    from contagent.agents import LAYERS

    text = derived_dockerfile("runner:1", "task:1", LAYERS["mini-swe-agent"], {"k": "v"})
    lines = text.splitlines()
    assert lines[0] == "FROM runner:1 AS agent" and lines[2] == "FROM task:1"
    assert "/usr/bin/python3.13" in lines[3]  # checked before anything is copied
    assert lines[4].startswith("COPY --from=agent /contagent-layer/ /")
    assert "import minisweagent" in lines[6]


@pytest.mark.parametrize("agent", ["codex", "claude-code", "mini-swe-agent", "openhands", "oracle"])
def test_every_layer_script_is_valid_sh_and_a_refusal_is_one_line(agent: str) -> None:
    import subprocess

    from contagent.agents import AGENTS, LAYERS
    from contagent.agents.layer import REFUSE, refuse

    assert set(LAYERS) == set(AGENTS)
    layer = LAYERS[agent]
    for script in (layer.collect, layer.check, layer.smoke):
        assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0, script
    proc = subprocess.run(
        ["sh", "-c", refuse("the base's libc is 'odd' $HOME")], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stdout == f"{REFUSE} the base's libc is 'odd' $HOME\n"


def test_the_oracle_has_no_image_to_build() -> None:
    from tests.helpers import cli

    proc = cli("build", "--agent", "oracle")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "contagent: error: oracle has no runner image to build: it runs with what the task "
        "image has"
    )


def test_the_skills_read_from_a_task_image_are_plain_names_sorted_and_bounded() -> None:
    from contagent.runner.tasks.harbor_phases import SKILLS_LIMIT, image_skills

    class Listing:
        def __init__(self, text: str) -> None:
            self.text, self.scripts = text, []

        def output(self, script: str) -> str:
            self.scripts.append(script)
            return self.text

    sb = Listing("pdf\n..\nbad name/x\ndocx\n")
    assert image_skills(sb, "/root/my skills") == ("docx", "pdf")  # type: ignore[arg-type]
    assert "cd '/root/my skills'" in sb.scripts[0] and "SKILL.md" in sb.scripts[0]
    many = Listing("".join(f"s{i:04d}\n" for i in range(SKILLS_LIMIT + 5)))
    assert len(image_skills(many, "/s")) == SKILLS_LIMIT  # type: ignore[arg-type]

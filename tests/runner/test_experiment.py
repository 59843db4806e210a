"""experiment.json loading: schema errors name the file and JSON path; names never leave their folder."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from contagent.errors import ContagentError
from contagent.runner.tasks.experiment import (
    discover_experiments,
    experiment_schema,
    load_experiment,
)
from tests.runner.helpers import write_experiment
from tools.schema_gen import SCHEMA_DIR

REPO = Path(__file__).resolve().parents[2]


def test_shipped_experiment_and_skill_load() -> None:
    exp = load_experiment(REPO / "experiments" / "exp_001", REPO / "skills")
    assert exp.name == "exp_001"
    assert exp.spec.skills == ["linux-networking"]
    assert exp.skill_dirs == (REPO / "skills" / "linux-networking",)
    front = (REPO / "skills" / "linux-networking" / "SKILL.md").read_text().split("---")[1]
    assert "name: linux-networking" in front and "description:" in front


def test_runtime_schema_is_the_committed_schema() -> None:
    committed = json.loads((SCHEMA_DIR / "experiment.schema.json").read_text())
    assert committed == experiment_schema()


def test_full_spec_loads(tmp_path: Path, skills_dir: Path) -> None:
    exp_dir = write_experiment(
        tmp_path,
        "web",
        {
            "task": "t",
            "skills": ["net"],
            "cap_add": ["NET_ADMIN"],
            "services": [
                {
                    "name": "web",
                    "image": "img:1",
                    "entrypoint_script": "web_entrypoint.sh",
                    "environment": {"A": "1"},
                }
            ],
        },
    )
    (exp_dir / "web_entrypoint.sh").write_text("echo hi\n")
    exp = load_experiment(exp_dir, skills_dir)
    assert exp.spec.services[0].environment == {"A": "1"}
    assert exp.entrypoint_path(exp.spec.services[0]) == exp_dir / "web_entrypoint.sh"


@pytest.mark.parametrize(
    ("spec", "where", "what"),
    [
        ({}, "$", "'task' is a required property"),
        ({"task": ""}, "$.task", "should be non-empty"),
        ({"task": 3}, "$.task", "is not of type 'string'"),
        ({"task": "t", "skills": "net"}, "$.skills", "is not of type 'array'"),
        ({"task": "t", "cap_add": ["net admin"]}, "$.cap_add[0]", "does not match"),
        (
            {"task": "t", "services": [{"name": "web"}]},
            "$.services[0]",
            "'image' is a required property",
        ),
        (
            {"task": "t", "services": [{"name": "Web_1", "image": "x"}]},
            "$.services[0].name",
            "does not match",
        ),
        (
            {"task": "t", "services": [{"name": "w", "image": "x", "environment": {"A": 1}}]},
            "$.services[0].environment.A",
            "is not of type 'string'",
        ),
        ({"task": "t", "extra": 1}, "$", "Additional properties are not allowed"),
    ],
)
def test_schema_errors_name_file_and_path(
    tmp_path: Path, spec: dict, where: str, what: str
) -> None:
    exp_dir = write_experiment(tmp_path, "bad", spec)
    with pytest.raises(ContagentError) as err:
        load_experiment(exp_dir, None)
    message = str(err.value)
    assert message.startswith(f"{exp_dir / 'experiment.json'}: {where}: "), message
    assert what in message
    assert "\n" not in message


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    exp_dir = write_experiment(tmp_path, "bad", None, raw='{\n  "task": "x",\n}')
    with pytest.raises(ContagentError, match=r"experiment\.json: invalid JSON at line 3 column 1"):
        load_experiment(exp_dir, None)


def test_not_utf8(tmp_path: Path) -> None:
    exp_dir = write_experiment(tmp_path, "bad", {"task": "t"})
    (exp_dir / "experiment.json").write_bytes(b'{"task": "\xff"}')
    with pytest.raises(ContagentError, match="not UTF-8"):
        load_experiment(exp_dir, None)


def test_missing_files(tmp_path: Path) -> None:
    exp_dir = tmp_path / "empty"
    exp_dir.mkdir()
    with pytest.raises(ContagentError, match=r"experiment\.json: missing"):
        load_experiment(exp_dir, None)
    exp_dir = write_experiment(tmp_path, "noscripts", {"task": "t"}, scripts=False)
    with pytest.raises(ContagentError, match=r"setup\.sh: missing"):
        load_experiment(exp_dir, None)


@pytest.mark.parametrize("skill", ["../net", "a/b", "..", "/etc", ".hidden"])
def test_skill_names_that_leave_the_folder_are_refused(
    tmp_path: Path, skills_dir: Path, skill: str
) -> None:
    exp_dir = write_experiment(tmp_path, "e", {"task": "t", "skills": [skill]})
    with pytest.raises(ContagentError, match=r"\$\.skills\[0\]: .*not a safe single path segment"):
        load_experiment(exp_dir, skills_dir)


def test_skill_symlink_out_of_the_skills_dir_is_refused(tmp_path: Path, skills_dir: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("---\nname: evil\ndescription: d\n---\n")
    (skills_dir / "evil").symlink_to(outside)
    exp_dir = write_experiment(tmp_path, "e", {"task": "t", "skills": ["evil"]})
    with pytest.raises(
        ContagentError, match=r"\$\.skills\[0\]: 'evil' leaves the skills directory"
    ):
        load_experiment(exp_dir, skills_dir)


def test_unknown_skill_and_no_skills_dir(tmp_path: Path, skills_dir: Path) -> None:
    exp_dir = write_experiment(tmp_path, "e", {"task": "t", "skills": ["nope"]})
    with pytest.raises(ContagentError, match=r"\$\.skills\[0\]: no .*nope/SKILL\.md"):
        load_experiment(exp_dir, skills_dir)
    with pytest.raises(ContagentError, match="no --skills-dir"):
        load_experiment(exp_dir, None)


@pytest.mark.parametrize("script", ["../x.sh", "/etc/passwd", "sub/../../x.sh"])
def test_entrypoint_scripts_that_leave_the_folder_are_refused(tmp_path: Path, script: str) -> None:
    (tmp_path / "x.sh").write_text("echo\n")
    exp_dir = write_experiment(
        tmp_path,
        "e",
        {"task": "t", "services": [{"name": "web", "image": "i", "entrypoint_script": script}]},
    )
    with pytest.raises(
        ContagentError,
        match=r"\$\.services\[0\]\.entrypoint_script: .* leaves the experiment folder",
    ):
        load_experiment(exp_dir, None)


def test_missing_entrypoint_and_duplicate_service(tmp_path: Path) -> None:
    exp_dir = write_experiment(
        tmp_path,
        "e",
        {"task": "t", "services": [{"name": "web", "image": "i", "entrypoint_script": "no.sh"}]},
    )
    with pytest.raises(ContagentError, match="does not exist"):
        load_experiment(exp_dir, None)
    exp_dir = write_experiment(
        tmp_path,
        "d",
        {"task": "t", "services": [{"name": "web", "image": "i"}, {"name": "web", "image": "j"}]},
    )
    with pytest.raises(ContagentError, match=r"\$\.services\[1\]\.name: duplicate"):
        load_experiment(exp_dir, None)


@pytest.mark.parametrize("name", ["..", "a b", "-x"])
def test_experiment_names_must_be_safe(tmp_path: Path, name: str) -> None:
    (tmp_path / "exps").mkdir()
    with pytest.raises(ContagentError, match="not a safe single path segment"):
        discover_experiments(tmp_path / "exps", [name], None)


def test_discover_reports_bad_ones_and_keeps_the_others(tmp_path: Path) -> None:
    write_experiment(tmp_path, "a_good", {"task": "t"})
    write_experiment(tmp_path, "b_bad", None, raw="{not json")
    write_experiment(tmp_path, "c_good", {"task": "u"})
    (tmp_path / ".hidden").mkdir()
    loaded, problems = discover_experiments(tmp_path, None, None)
    assert [e.name for e in loaded] == ["a_good", "c_good"]
    assert [p.name for p in problems] == ["b_bad"]
    assert "b_bad/experiment.json: invalid JSON" in problems[0].message


def test_discover_selected_and_missing(tmp_path: Path) -> None:
    write_experiment(tmp_path, "a", {"task": "t"})
    write_experiment(tmp_path, "b", {"task": "t"})
    loaded, _ = discover_experiments(tmp_path, ["b"], None)
    assert [e.name for e in loaded] == ["b"]
    with pytest.raises(ContagentError, match="no such experiment"):
        discover_experiments(tmp_path, ["zzz"], None)
    with pytest.raises(ContagentError, match="experiments directory not found"):
        discover_experiments(tmp_path / "nope", None, None)


def test_schema_is_draft_2020_12_valid() -> None:
    jsonschema.Draft202012Validator.check_schema(experiment_schema())

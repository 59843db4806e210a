"""Every ATIF file exported from the bundled samples is read by Harbor's own models.

Harbor (``harbor`` 0.26, Python >= 3.12) lives in its own venv, never in contagent's
dependencies: this test exports here and runs ``atif_check.py`` with that venv's Python
(``CONTAGENT_HARBOR_PYTHON``, which ``scripts/ci-harbor.sh`` sets).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.validate.check import validate
from tests.helpers import REPO
from tools.token_samples import build_token_rollouts

pytestmark = pytest.mark.harbor

CHECK = Path(__file__).with_name("atif_check.py")


def _harbor_python() -> str:
    python = os.environ.get("CONTAGENT_HARBOR_PYTHON")
    if not python or not Path(python).is_file():
        pytest.fail(
            "set CONTAGENT_HARBOR_PYTHON to the Harbor venv's python (scripts/ci-harbor.sh)"
        )
    return python


def _harbor_verdicts(files: list[Path]) -> dict[str, str]:
    proc = subprocess.run(
        [_harbor_python(), str(CHECK), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts: dict[str, str] = orjson.loads(proc.stdout)
    return verdicts


@pytest.mark.parametrize("filter", ["all", "passed"])
def test_every_exported_trajectory_is_valid_atif(tmp_path: Path, filter: str) -> None:
    runs = tmp_path / "runs"
    tokens = runs / "tokens"
    build_token_rollouts(tokens)
    (runs / "samples").symlink_to(REPO / "data" / "rollouts")
    out = tmp_path / "out"
    export([runs], out, ExportOptions(formats=("atif",), filter=filter))  # type: ignore[arg-type]
    index = orjson.loads((out / "atif" / "_index.json").read_bytes())
    files = [out / "atif" / w["file"] for w in index["written"]]
    assert len(files) > 30
    assert any(f.name == "side_call.json" for f in files)
    verdicts = _harbor_verdicts(files)
    assert verdicts == {str(f): "ok" for f in files}
    assert validate(out / "results.jsonl").ok


def test_harbor_rejects_what_it_should(tmp_path: Path) -> None:
    """The check can fail: a document Harbor's model refuses is reported as such."""
    out = tmp_path / "out"
    export([REPO / "data" / "rollouts" / "side_call"], out, ExportOptions(formats=("atif",)))
    path = out / "atif" / "side_call.json"
    doc = orjson.loads(path.read_bytes())
    doc["steps"][0]["metrics"] = {"prompt_tokens": 1}  # metrics on a system step
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(doc))
    (verdict,) = _harbor_verdicts([bad]).values()
    assert verdict.startswith("Trajectory rejects it")

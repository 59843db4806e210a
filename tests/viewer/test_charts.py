"""Charts (one set, for the dataset card and the viewer): the data they draw, the files the dataset card gets, and the card's links to them."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from contagent.charts import export_charts as charts
from contagent.core.rows import summarize
from contagent.export.export_summary import ExportSummary
from contagent.export.formats.folder import read_dataset_folder
from contagent.hub.upload import _plan
from tests.helpers import cli


def test_the_charts_draw_the_rows_summary() -> None:
    row = {
        "raw_log": {"path": "/x"},
        "repairs": [],
        "training_ready": False,
        "passed": True,
        "excluded": [{"reason": "duplicate_retry"}] * 5,
        "not_ready_kinds": ["incomplete_consumed", "tool_conflict"],
        "token_usage": {
            "billed": {"total_tokens": 10},
            "selected": {"total_tokens": 7},
            "excluded": {},
        },
        "experiment": "exp-a",
        "model": "m1",
        "steps": [{}] * 3,
    }
    summary = summarize(
        [
            row,
            {**row, "training_ready": True, "passed": False, "not_ready_kinds": [], "model": "m2"},
        ]
    )
    made = {c.slug: c for c in charts.summary_charts(summary)}
    assert dict(zip(made["rollouts"].labels, made["rollouts"].values, strict=True)) == {
        "read": 2,
        "passed": 1,
        "training-ready": 1,
        "not training-ready": 1,
    }
    assert made["not-ready-kinds"].labels == ("incomplete_consumed", "tool_conflict")
    assert made["excluded-reasons"].values == (10,)
    assert made["tokens"].values == (20, 14, 0)
    assert made["pass-rate-experiment"].values == (0.5,)
    assert dict(
        zip(made["pass-rate-model"].labels, made["pass-rate-model"].values, strict=True)
    ) == {"m1": 1.0, "m2": 0.0}
    assert made["steps"].values == (3.0, 3.0)
    assert "pass-rate-model" not in {c.slug for c in charts.summary_charts(summarize([row]))}


def test_bars_keep_the_largest_and_sum_the_rest() -> None:
    chart = charts.bar("b", "B", {f"k{i:02d}": i for i in range(30)})
    assert len(chart.labels) == 20 and chart.labels[0] == "k29"
    assert chart.labels[-1] == "other (11)" and chart.values[-1] == sum(range(11))
    assert sum(chart.values) == sum(range(30))


def test_render_is_repeatable_and_names_are_not_markup() -> None:
    chart = charts.bar("x", "Pass rate", {"<script>alert(1)</script>": 0.5}, percent=True)
    svg = charts.render(chart, "svg")
    assert svg == charts.render(chart, "svg")
    assert b"<script" not in svg and b"<svg" in svg
    assert charts.render(chart, "png").startswith(b"\x89PNG")


def test_the_export_card_shows_its_charts_and_an_upload_carries_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli("export", "data/rollouts", "--out", str(out), "--filter", "all", check=True)
    folder = out / "prime-sft"
    card = (folder / "README.md").read_text()
    links = re.findall(r"!\[([^\]]+)\]\((images/[a-z0-9-]+\.png)\)", card)
    summary = ExportSummary.model_validate_json((out / "export-summary.json").read_bytes())
    assert [title for title, _ in links] == [c.title for c in charts.summary_charts(summary)]
    assert card.index("## Charts") < card.index("## Columns")
    for _, rel in links:
        with Image.open(folder / rel) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 100
    rollouts = charts.summary_charts(summary)[0]
    samples = list(Path("data/rollouts").rglob("exchanges.jsonl"))
    assert rollouts.values[0] == summary.rollouts_read == len(samples)
    local = read_dataset_folder(folder)
    assert [local.relative(p) for p in local.images] == sorted(rel for _, rel in links)
    _, uploaded, _, _ = _plan(local, {})
    assert {rel for _, rel in links} <= set(uploaded)


def test_an_export_draws_its_charts_once_for_every_format_folder(
    samples: Path, tmp_path: Path, monkeypatch
) -> None:
    from contagent.export.exporter import ExportOptions, export

    drawn: list[str] = []
    real = charts.card_png

    def counting(chart: charts.Chart) -> bytes:
        drawn.append(chart.slug)
        return real(chart)

    monkeypatch.setattr(charts, "card_png", counting)
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=("prime-sft", "trl")))
    summary = ExportSummary.model_validate_json((out / "export-summary.json").read_bytes())
    assert sorted(drawn) == sorted(c.slug for c in charts.summary_charts(summary))
    for image in (out / "prime-sft" / "images").iterdir():
        assert image.read_bytes() == (out / "trl" / "images" / image.name).read_bytes()

"""Charts: the data they draw, the files the dataset card gets, and the card's links to them."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from PIL import Image

from contagent import charts
from contagent.formats.folder import read_dataset_folder
from contagent.hub.upload import _plan
from tests.conftest import cli


def test_card_charts_draw_the_export_summary() -> None:
    summary = {
        "rollouts_read": 12,
        "training_ready": 9,
        "passed": 6,
        "not_ready_reasons": {"tool_conflict": 1, "incomplete_consumed": 2},
        "exclusions": {"duplicate_retry": 5},
        "tokens": {"billed": {"total_tokens": 10}, "selected": {"total_tokens": 7}},
    }
    made = {c.slug: c for c in charts.card_charts(summary)}
    assert dict(zip(made["rollouts"].labels, made["rollouts"].values, strict=True)) == {
        "read": 12,
        "passed": 6,
        "training-ready": 9,
        "not training-ready": 3,
    }
    assert made["not-ready-kinds"].labels == ("incomplete_consumed", "tool_conflict")
    assert made["excluded-reasons"].values == (5,)
    assert made["tokens"].values == (10, 7, 0)
    assert charts.card_charts({"tokens": "odd", "exclusions": [1]})  # read defensively


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
    assert [title for title, _ in links] == [c.title for c in charts.card_charts({"tokens": {}})]
    assert card.index("## Charts") < card.index("## Columns")
    for _, rel in links:
        with Image.open(folder / rel) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 100
    summary = orjson.loads((out / "export-summary.json").read_bytes())
    rollouts = charts.card_charts(summary)[0]
    samples = list(Path("data/rollouts").rglob("exchanges.jsonl"))
    assert rollouts.values[0] == summary["rollouts_read"] == len(samples)
    local = read_dataset_folder(folder)
    assert [local.relative(p) for p in local.images] == sorted(rel for _, rel in links)
    _, uploaded, _, _ = _plan(local, {})
    assert {rel for _, rel in links} <= set(uploaded)


def test_an_export_draws_its_charts_once_for_every_format_folder(
    samples: Path, tmp_path: Path, monkeypatch
) -> None:
    from contagent.exporters.export import ExportOptions, export

    drawn: list[str] = []
    real = charts.render

    def counting(chart: charts.Chart, kind: str) -> bytes:
        drawn.append(chart.slug)
        return real(chart, kind)

    monkeypatch.setattr(charts, "render", counting)
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=("prime-sft", "trl")))
    assert sorted(drawn) == sorted(c.slug for c in charts.card_charts({}))
    for image in (out / "prime-sft" / "images").iterdir():
        assert image.read_bytes() == (out / "trl" / "images" / image.name).read_bytes()

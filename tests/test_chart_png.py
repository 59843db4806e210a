"""The dataset card's PNG charts: what they draw is the data, and the same data the same bytes."""

from __future__ import annotations

import io

from PIL import Image

from contagent.charts import png as chart_png
from contagent.charts.export_charts import _COLOR, bar, card_png, hist

BLUE = (0x3B, 0x6E, 0xA5)


def _bar_lengths(png: bytes) -> list[int]:
    """Length in pixels of each bar, top to bottom (runs of the bar colour per row band)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    rows = [sum(image.getpixel((x, y)) == BLUE for x in range(width)) for y in range(height)]
    lengths, inside = [], False
    for n in rows:
        if n and not inside:
            lengths.append(n)
        inside = bool(n)
    return lengths


def test_bars_are_drawn_to_scale_largest_first() -> None:
    png = card_png(bar("x", "Reasons", {"a": 2, "b": 8, "c": 4}, "rollouts"))
    lengths = _bar_lengths(png)
    assert len(lengths) == 3
    assert lengths[0] > lengths[1] > lengths[2]
    assert abs(lengths[0] / lengths[2] - 4) < 0.1 and abs(lengths[1] / lengths[2] - 2) < 0.1


def test_the_same_chart_gives_the_same_bytes_and_a_valid_png() -> None:
    chart = bar("p", "Pass rate", {"exp_a": 0.25, "exp_b": 1.0}, "", percent=True)
    first, second = card_png(chart), card_png(chart)
    assert first == second and first.startswith(b"\x89PNG")
    assert Image.open(io.BytesIO(first)).size[0] == chart_png.WIDTH
    lengths = _bar_lengths(first)
    assert abs(lengths[0] / lengths[1] - 4) < 0.1  # shares drawn on one 0-100% scale


def test_a_histogram_counts_its_samples_and_empty_charts_say_none() -> None:
    png = card_png(hist("steps", "Steps per rollout", [1, 1, 1, 2], "steps"))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    columns = [
        sum(image.getpixel((x, y)) == BLUE for y in range(image.size[1]))
        for x in range(image.size[0])
    ]
    heights = sorted({c for c in columns if c})
    assert len(heights) == 2 and abs(heights[1] / heights[0] - 3) < 0.1
    for empty in (bar("e", "Nothing", {}), hist("h", "Nothing", [], "steps")):
        image = Image.open(io.BytesIO(card_png(empty))).convert("RGB")
        assert BLUE not in {
            image.getpixel((x, y)) for x in range(0, 640, 4) for y in range(0, image.size[1], 4)
        }
    assert _COLOR == "#3b6ea5"

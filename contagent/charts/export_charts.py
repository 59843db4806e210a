"""Charts of an export: SVG for the viewer (matplotlib), PNG for the dataset card (Pillow).

A chart is plain data (:class:`Chart`); :func:`render` draws it. Only matplotlib's
object API and the Agg/SVG canvases are used (no ``pyplot`` global state), so
charts can be drawn from any thread. Text becomes glyph outlines in SVG, so names
taken from rollouts (experiments, models) cannot inject markup into a page.
"""

from __future__ import annotations

import io
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from contagent.core.rows import RowSummary
from contagent.layout import DatasetFolderPaths

CHART_DIR = DatasetFolderPaths.IMAGES_DIR
"""Folder, inside a dataset folder, that holds the card's chart files."""

_COLOR = "#3b6ea5"
# matplotlib's import and its font and text caches are not thread-safe: draw one chart at a time.
_LOCK = threading.Lock()
_MAX_BARS = 20  # a bar chart keeps its largest categories; the rest are summed as "other"


@dataclass(frozen=True)
class Chart:
    slug: str  # file name stem: [a-z0-9-]
    title: str
    kind: Literal["bar", "hist"]
    labels: tuple[str, ...] = ()  # bar: one per value
    values: tuple[float, ...] = ()  # bar: heights; hist: the samples
    xlabel: str = ""
    percent: bool = False  # bar values are shares in [0, 1]


def bar(
    slug: str, title: str, counts: Mapping[str, float], xlabel: str = "", percent: bool = False
) -> Chart:
    """Horizontal bars, largest first; beyond the first ``_MAX_BARS`` summed as ``other``."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(items) > _MAX_BARS and not percent:
        rest = sum(v for _, v in items[_MAX_BARS - 1 :])
        items = [*items[: _MAX_BARS - 1], (f"other ({len(items) - _MAX_BARS + 1})", rest)]
    elif len(items) > _MAX_BARS:
        items = items[:_MAX_BARS]
    return Chart(
        slug,
        title,
        "bar",
        tuple(str(k) for k, _ in items),
        tuple(float(v) for _, v in items),
        xlabel,
        percent,
    )


def hist(slug: str, title: str, values: Sequence[float], xlabel: str) -> Chart:
    return Chart(slug, title, "hist", values=tuple(float(v) for v in values), xlabel=xlabel)


def render(chart: Chart, fmt: Literal["svg", "png"] = "svg") -> bytes:
    """Draw ``chart``; the bytes are the same for the same chart (no dates, fixed ids)."""
    with _LOCK:
        return _render(chart, fmt)


def _render(chart: Chart, fmt: Literal["svg", "png"]) -> bytes:
    from matplotlib.figure import Figure

    n = len(chart.labels)
    height = 1.3 + 0.3 * n if chart.kind == "bar" else 3.0
    fig = Figure(figsize=(6.4, min(height, 8.0)), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(chart.title, fontsize=11, loc="left")
    if chart.kind == "bar":
        _draw_bars(ax, chart)
    else:
        _draw_hist(ax, chart)
    ax.spines[["top", "right"]].set_visible(False)
    buf = io.BytesIO()
    if fmt == "svg":
        import matplotlib

        with matplotlib.rc_context({"svg.hashsalt": chart.slug, "svg.fonttype": "path"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
    else:
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _draw_bars(ax: Any, chart: Chart) -> None:
    if not chart.labels:
        _empty(ax)
        return
    labels = [_short(label) for label in chart.labels]
    positions = list(range(len(labels)))
    bars = ax.barh(positions, chart.values, color=_COLOR)
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()
    texts = [f"{v:.0%}" if chart.percent else f"{v:,.0f}" for v in chart.values]
    ax.bar_label(bars, texts, padding=3, fontsize=8)
    if chart.percent:
        ax.set_xlim(0, 1.15)
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x:.0%}")
    else:
        from matplotlib.ticker import MaxNLocator

        ax.set_xlim(0, max(max(chart.values), 1) * 1.18)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(chart.xlabel)


def _draw_hist(ax: Any, chart: Chart) -> None:
    if not chart.values:
        _empty(ax)
        return
    low, high = min(chart.values), max(chart.values)
    bins = max(1, min(30, len(set(chart.values))))
    ax.hist(chart.values, bins=bins, range=(low, high if high > low else low + 1), color=_COLOR)
    ax.set_xlabel(chart.xlabel)
    ax.set_ylabel("rollouts")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax: Any) -> None:
    ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes, color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def _short(label: str, limit: int = 40) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def summary_charts(summary: RowSummary) -> list[Chart]:
    """The charts of a set of rows: the dataset card draws them as PNG, the viewer as SVG."""
    read, ready = summary.rollouts_read, summary.training_ready
    rollouts = {
        "read": read,
        "passed": summary.passed,
        "training-ready": ready,
        "not training-ready": read - ready,
    }
    out = [bar("rollouts", "Rollouts", rollouts, "rollouts")]
    for group, counts in (("experiment", summary.per_experiment), ("model", summary.per_model)):
        if group == "experiment" or len(counts) > 1:
            rate = {name: c.passed / c.rollouts for name, c in counts.items() if c.rollouts}
            out.append(bar(f"pass-rate-{group}", f"Pass rate per {group}", rate, "", True))
    tokens = summary.tokens
    totals = {
        part: getattr(tokens, part).total_tokens for part in ("billed", "selected", "excluded")
    }
    steps = [float(n) for n, k in summary.steps_per_rollout.items() for _ in range(k)]
    out += [
        bar(
            "not-ready-kinds",
            "Rollouts not training-ready, by kind",
            summary.not_ready_reasons,
            "rollouts",
        ),
        bar("excluded-reasons", "Exchanges excluded, by reason", summary.exclusions, "exchanges"),
        bar("tokens", "Tokens (total)", totals, "tokens"),
        hist("steps", "Steps per rollout", steps, "steps"),
    ]
    return out


@dataclass(frozen=True)
class CardImage:
    """One chart of a dataset card, drawn: its title, file name and PNG bytes."""

    title: str
    name: str
    png: bytes


def card_images(summary: RowSummary) -> list[CardImage]:
    """The summary's charts drawn as PNGs, once per export whatever the number of folders."""
    return [CardImage(c.title, f"{c.slug}.png", card_png(c)) for c in summary_charts(summary)]


def card_png(chart: Chart) -> bytes:
    """``chart`` as the dataset card shows it: a PNG drawn by :mod:`contagent.charts.png`."""
    from contagent.charts import png as chart_png

    if chart.kind == "bar":
        labels = [_short(label) for label in chart.labels]
        return chart_png.bars(
            chart.title, labels, chart.values, chart.xlabel, chart.percent, _COLOR
        )
    return chart_png.histogram(chart.title, chart.values, chart.xlabel, "rollouts", _COLOR)


def write_card_charts(folder: Path, images: Sequence[CardImage]) -> list[tuple[str, str]]:
    """Write ``images`` under ``folder/images/``; return (title, path) pairs.

    Paths are relative to ``folder`` (POSIX), ready for Markdown image links in its README.
    """
    out_dir = Path(folder) / CHART_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[tuple[str, str]] = []
    for image in images:
        tmp = out_dir / f".{image.name}.{secrets.token_hex(4)}.tmp"
        tmp.write_bytes(image.png)
        os.replace(tmp, out_dir / image.name)
        written.append((image.title, f"{CHART_DIR}/{image.name}"))
    return written

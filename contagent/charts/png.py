"""The dataset card's charts as PNG, drawn with Pillow in milliseconds.

Every default export writes a card, so its charts must cost little: matplotlib's
import and layout engine alone take longer than exporting a small run. The card's
charts are simple (horizontal bars, one histogram), drawn here with Pillow's
raster drawing and its bundled FreeType font; the viewer keeps matplotlib's SVG.
The same data gives the same bytes (no dates, no metadata).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

WIDTH = 640
_ROW = 24  # px per bar
_PAD = 12
_TITLE = 34  # px above the plot
_AXIS = 34  # px below it: ticks and the axis label
_INK, _GRID, _MUTED, _BACK = (34, 34, 34), (220, 220, 220), (119, 119, 119), (255, 255, 255)
_FONTS: dict[int, ImageFont.FreeTypeFont | ImageFont.ImageFont] = {}


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    if size not in _FONTS:
        _FONTS[size] = ImageFont.load_default(size=size)
    return _FONTS[size]


def _rgb(color: str) -> tuple[int, int, int]:
    return (int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16))


def _width(draw: ImageDraw.ImageDraw, text: str, size: int) -> float:
    return draw.textlength(text, font=_font(size))


def _canvas(height: int, title: str) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (WIDTH, height), _BACK)
    draw = ImageDraw.Draw(image)
    draw.text((_PAD, 10), title, fill=_INK, font=_font(15))
    return image, draw


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    # Named rather than given a format, Pillow picks the PNG writer from the extension
    # and loads that plugin alone instead of its five common ones (about 10 ms).
    out.name = "chart.png"
    image.save(out, optimize=False)
    return out.getvalue()


def _ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top / step) + 2) if i * step <= top * 1.0001 + step]


def _number(value: float, percent: bool) -> str:
    return f"{value:.0%}" if percent else f"{value:,.0f}"


def _axis(
    draw: ImageDraw.ImageDraw, left: int, right: int, top: int, bottom: int, scale: float,
    ticks: list[float], percent: bool, label: str,
) -> None:  # fmt: skip
    for tick in ticks:
        x = left + tick * scale
        if x > right + 1:
            continue
        draw.line([(x, top), (x, bottom)], fill=_GRID)
        text = _number(tick, percent)
        draw.text((x - _width(draw, text, 10) / 2, bottom + 4), text, fill=_MUTED, font=_font(10))
    draw.line([(left, bottom), (right, bottom)], fill=_MUTED)
    if label:
        x = (left + right) / 2 - _width(draw, label, 11) / 2
        draw.text((x, bottom + 18), label, fill=_INK, font=_font(11))


def bars(
    title: str, labels: Sequence[str], values: Sequence[float], xlabel: str, percent: bool,
    color: str,
) -> bytes:  # fmt: skip
    """Horizontal bars, one per label, in the order given, each with its value at its end."""
    height = _TITLE + _AXIS + max(1, len(labels)) * _ROW + _PAD
    image, draw = _canvas(height, title)
    if not labels:
        draw.text((WIDTH / 2 - 12, height / 2 - 6), "none", fill=_MUTED, font=_font(12))
        return _png(image)
    left = _PAD + int(min(260, max(_width(draw, t, 11) for t in labels))) + 8
    right = WIDTH - _PAD - 56  # room for the last value
    top = max(values) if not percent else 1.0
    ticks = _ticks(top)
    scale = (right - left) / max(ticks[-1], top, 1e-9)
    bottom = _TITLE + len(labels) * _ROW
    _axis(draw, left, right, _TITLE, bottom, scale, ticks, percent, xlabel)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = _TITLE + i * _ROW
        draw.rectangle([left, y + 4, left + max(value * scale, 1), y + _ROW - 4], fill=_rgb(color))
        name = label if _width(draw, label, 11) <= 260 else label[:36] + "…"
        draw.text((left - 6 - _width(draw, name, 11), y + 5), name, fill=_INK, font=_font(11))
        text = _number(value, percent)
        draw.text((left + value * scale + 4, y + 6), text, fill=_INK, font=_font(10))
    return _png(image)


def histogram(title: str, samples: Sequence[float], xlabel: str, ylabel: str, color: str) -> bytes:
    """Counts of ``samples`` in up to 30 equal bins between their least and largest value."""
    height = 260
    image, draw = _canvas(height, title)
    if not samples:
        draw.text((WIDTH / 2 - 12, height / 2 - 6), "none", fill=_MUTED, font=_font(12))
        return _png(image)
    low, high = min(samples), max(samples)
    high = high if high > low else low + 1
    n = max(1, min(30, len(set(samples))))
    counts = [0] * n
    for value in samples:
        counts[min(n - 1, int((value - low) / (high - low) * n))] += 1
    left, right, top, bottom = _PAD + 40, WIDTH - _PAD * 2, _TITLE + 16, height - _AXIS
    scale_y = (bottom - top) / max(counts)
    width = (right - left) / n
    for i, count in enumerate(counts):
        x = left + i * width
        draw.rectangle([x + 1, bottom - count * scale_y, x + width - 1, bottom], fill=_rgb(color))
    draw.line([(left, top), (left, bottom)], fill=_MUTED)
    for tick in _ticks(max(counts), 4):
        y = bottom - tick * scale_y
        text = f"{tick:,.0f}"
        draw.text((left - 4 - _width(draw, text, 10), y - 6), text, fill=_MUTED, font=_font(10))
    draw.text((_PAD, top - 16), ylabel, fill=_MUTED, font=_font(10))
    draw.line([(left, bottom), (right, bottom)], fill=_MUTED)
    for text, x in ((f"{low:,.0f}", left), (f"{high:,.0f}", right)):
        draw.text((x - _width(draw, text, 10) / 2, bottom + 4), text, fill=_MUTED, font=_font(10))
    if xlabel:
        draw.text((WIDTH / 2 - _width(draw, xlabel, 11) / 2, bottom + 18), xlabel, fill=_INK,
                  font=_font(11))  # fmt: skip
    return _png(image)

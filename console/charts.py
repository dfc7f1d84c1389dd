"""Charts as inline SVG drawn by the templates (templates/_charts.html) from the geometry here: no
JavaScript, nothing fetched. Pure: numbers in, coordinates out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Bar", "BarChart", "LineChart", "Series", "bar_chart", "line_chart"]

WIDTH, HEIGHT, MARGIN = 600, 200, 36


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    css_class: str
    points: str  # "x,y x,y ..." for a polyline
    dots: list[tuple[float, float]]  # the same points, drawn too: one sample is a dot, not nothing
    last: float | None


@dataclass(frozen=True, slots=True)
class LineChart:
    width: int
    height: int
    series: list[Series]
    target_y: float | None  # the target's horizontal line
    target: float | None
    top: float  # the value at the top of the plot
    ticks: list[tuple[float, str]]  # (y, label)


def _nice_top(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at or above value (a readable axis top)."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def line_chart(
    series: Sequence[tuple[str, str, Sequence[float | None]]], target: float | None = None
) -> LineChart:
    """`series`: (name, css class, values in time order; None: no value at that sample)."""
    values = [v for _, _, points in series for v in points if v is not None]
    top = _nice_top(max([*values, target or 0.0, 1.0]) * 1.1)
    count = max((len(points) for _, _, points in series), default=0)
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def y(value: float) -> float:
        return round(MARGIN + plot_h * (1 - min(value, top) / top), 1)

    def x(index: int) -> float:
        return round(MARGIN + (plot_w * index / (count - 1) if count > 1 else plot_w / 2), 1)

    drawn = []
    for name, css_class, points in series:
        dots = [(x(i), y(v)) for i, v in enumerate(points) if v is not None]
        last = next((v for v in reversed(points) if v is not None), None)
        drawn.append(Series(name, css_class, " ".join(f"{a},{b}" for a, b in dots), dots, last))
    ticks = [(y(top * share), f"{top * share:g}") for share in (0.0, 0.5, 1.0)]
    return LineChart(WIDTH, HEIGHT, drawn, None if target is None else y(target), target, top, ticks)


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    y: float
    width: float
    over: bool  # beyond the target


@dataclass(frozen=True, slots=True)
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    label_width: int
    target_x: float | None
    target: float | None


def bar_chart(values: Sequence[tuple[str, float]], target: float | None = None) -> BarChart:
    label_width, row = 150, 22
    top = _nice_top(max([v for _, v in values] + [target or 0.0, 1.0]) * 1.05)
    plot_w = WIDTH - label_width - 60
    bars = [
        Bar(
            label,
            value,
            MARGIN / 2 + index * row,
            round(plot_w * min(value, top) / top, 1),
            target is not None and value > target,
        )
        for index, (label, value) in enumerate(values)
    ]
    height = int(MARGIN + row * max(len(values), 1))
    target_x = None if target is None else round(label_width + plot_w * target / top, 1)
    return BarChart(WIDTH, height, bars, label_width, target_x, target)

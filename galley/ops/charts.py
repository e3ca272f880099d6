"""The charts of the operators' page: per-minute line charts as SVG geometry, drawn on the server.

`build_chart` turns series of per-minute values into a `Chart` the template draws (polylines,
points with a tooltip, axis ticks): no script, nothing from another site. It reads nothing; the
view (galley.ops.views) hands it the selectors' figures.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Chart geometry, in the SVG's own units; the SVG scales to the width it is given.
WIDTH, HEIGHT = 320, 170
LEFT, RIGHT, TOP, BOTTOM = 34, 6, 10, 22


@dataclass(frozen=True)
class ChartPoint:
    x: float
    y: float
    label: str


@dataclass(frozen=True)
class ChartSeries:
    name: str
    css: str  # a chart-series-N class of galley.css, or a colour with a meaning (views.OUTCOME_COLOURS)
    lines: list[str]  # SVG polyline `points`, one per run of minutes that have a value
    points: list[ChartPoint]
    total: str


@dataclass(frozen=True)
class Chart:
    ident: str
    title: str
    unit: str
    series: list[ChartSeries]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]

    @property
    def has_data(self) -> bool:
        return any(series.points for series in self.series)

    @property
    def width(self) -> int:
        return WIDTH

    @property
    def height(self) -> int:
        return HEIGHT

    @property
    def plot_left(self) -> int:
        return LEFT

    @property
    def plot_right(self) -> int:
        return WIDTH - RIGHT

    @property
    def plot_bottom(self) -> int:
        return HEIGHT - BOTTOM


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at least `value`: an axis that ends on a round number."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= value)


def build_chart(
    *,
    ident: str,
    title: str,
    unit: str,
    minutes: Sequence[datetime.datetime],
    series: Iterable[tuple[str, Sequence[float | None], str]],
    describe: str,
    colours: Sequence[str] = (),
) -> Chart:
    """A line chart of per-minute values (None: nothing that minute, drawn as a gap).

    `series` holds (name, values, total shown in the legend); `describe` formats a point's
    tooltip from the series name, the minute and the value. `colours` gives each series its CSS
    class, in order, where its colour has a meaning; the others take the neutral palette.
    """
    series = list(series)
    top = _nice_ceiling(max((v for _, values, _ in series for v in values if v is not None), default=0.0))
    span_x = WIDTH - LEFT - RIGHT
    span_y = HEIGHT - TOP - BOTTOM
    step = span_x / max(len(minutes) - 1, 1)

    def xy(index: int, value: float) -> tuple[float, float]:
        return round(LEFT + index * step, 1), round(TOP + span_y * (1 - value / top), 1)

    drawn = []
    for number, (name, values, total) in enumerate(series):
        lines: list[str] = []
        points: list[ChartPoint] = []
        run: list[str] = []
        for index, value in enumerate(values):
            if value is None:
                if run:
                    lines.append(" ".join(run))
                run = []
                continue
            x, y = xy(index, value)
            run.append(f"{x},{y}")
            if value:  # a minute of nothing is the line itself, not a point worth a tooltip
                label = describe.format(series=name, minute=f"{minutes[index]:%H:%M}", value=_number(value))
                points.append(ChartPoint(x=x, y=y, label=label))
        if run:
            lines.append(" ".join(run))
        css = colours[number] if number < len(colours) else f"chart-series-{number % 6}"
        drawn.append(ChartSeries(name=name, css=css, lines=lines, points=points, total=total))
    y_ticks = [(round(TOP + span_y * (1 - share), 1), _number(top * share)) for share in (0, 0.5, 1)]
    last = len(minutes) - 1
    x_ticks = [(round(LEFT + index * step, 1), f"{minutes[index]:%H:%M}") for index in (0, last // 2, last)]
    return Chart(ident=ident, title=title, unit=unit, series=drawn, y_ticks=y_ticks, x_ticks=x_ticks)


def series_total(values: Sequence[float | None]) -> str:
    """The sum of a series, as its legend shows it."""
    return _number(sum(value or 0 for value in values))


def _number(value: float) -> str:
    """A figure as an axis or a tooltip shows it: whole from 10 up, two significant digits below."""
    return f"{value:.0f}" if value >= 10 or float(value).is_integer() else f"{value:.2g}"

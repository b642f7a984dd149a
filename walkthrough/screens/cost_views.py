"""How the Costs stage draws its curves and its all-machines table (the numbers come from engine.curves/machines).

`draw_curve` puts an `engine.curves.Curve` on a textual-plotext plot (log x
axis, y ticks in the figures' own units, the 8 basic colours so 16-colour
terminals show it); `curve_table` is the same curve as text; `machines_table`
is every profile's row from `engine.machines`.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual_plotext import PlotextPlot

from walkthrough.costs.budget import FITS, NO_FIT, OFFLOAD
from walkthrough.costs.curves import Curve
from walkthrough.costs.machines import MachineRow
from walkthrough.costs.race import Lane, finish_time, tokens_shown
from walkthrough.textsafe import safe_text
from walkthrough.units import fmt
from walkthrough.words import count

COLOURS = ("red", "green", "blue", "yellow", "cyan", "magenta")
Y_TICKS = 5
RACE_NAME = 14  # columns of a lane's name, widened to the longest (up to RACE_NAME_MAX)
RACE_NAME_MAX = 24
RACE_LABEL = 19  # columns of a lane's rate and band, after its name
FAR = 4  # a flat line this many times above the other curves is written, not drawn
FIT_WORD = {FITS: "yes", OFFLOAD: "offload", NO_FIT: "no"}


MIN_PLOT = (24, 8)  # columns, rows below which plotext cannot place its legend and axes


class CurvePlot(PlotextPlot):
    """One `Curve` on a plotext plot, drawn afresh at every render (plotext's second build of the same
    figure loses its legend colours); says so instead of drawing when the terminal leaves too little room."""

    curve: Curve | None = None

    def show(self, curve: Curve) -> None:
        self.curve = curve
        self.refresh()

    def render(self) -> RenderResult:
        if self.curve is None:
            return Text("")
        if self.size.width < MIN_PLOT[0] or self.size.height < MIN_PLOT[1]:
            return Text("too small to plot: v shows the table", style="dim")
        draw_curve(self.plt, self.curve)
        return super().render()


def draw_curve(plt, curve: Curve) -> None:
    """Plot every series of `curve` on a textual-plotext `Plot` (the widget's `.plt`)."""
    plt.clear_figure()
    band = f"; {curve.band.split(':')[0]}" if curve.band else ""  # 'realistic ±19%' or '... no band' (the table
    plt.xlabel(curve.x_label + band)  # view says the rest; the title has no room left at 80 columns)
    plt.xscale("log")
    title = curve.title
    top = 0.0
    for colour, series in zip(COLOURS, curve.series):
        if _far_above(series, curve):  # a flat line far above the rest (the free memory) would flatten them
            title += f"; {series.label}: {fmt(series.ys[0], series.unit)}, off the top"
            continue
        ys = [max(y, 0.0) for y in series.ys]
        top = max(top, *ys)
        plt.plot(list(curve.xs), ys, label=series.label, color=colour, marker="braille")
    plt.title(title)
    if top > 0:
        ticks = [top * i / (Y_TICKS - 1) for i in range(Y_TICKS)]
        plt.ylim(0, top)  # the ticks start at 0: a curve above 0 would leave the 0 label below the canvas,
        plt.yticks(ticks, [fmt(t, curve.y_unit) for t in ticks])  # on the x axis's row ('0 tokens/s256')
    plt.xticks(list(curve.xs), [_tokens(x) for x in curve.xs])


def _far_above(series, curve: Curve) -> bool:
    """A constant series more than FAR times every other series' largest value."""
    others = [max(s.ys) for s in curve.series if s is not series]
    flat = len(set(series.ys)) == 1
    return flat and bool(others) and series.ys[0] > FAR * max(max(others), 1e-30)


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else (f"{n / 1024:.1f}K" if n >= 1024 else str(n))


def curve_table(curve: Curve) -> Table:
    """The curve's points as text: one row per x, one column per series."""
    table = Table(box=None, padding=(0, 1), show_edge=False, title=curve.title, title_justify="left")
    table.add_column(curve.x_label, justify="right")
    for series in curve.series:
        table.add_column(safe_text(series.label), justify="right", no_wrap=True)
    for i, x in enumerate(curve.xs):
        table.add_row(f"{x:,}", *(fmt(s.ys[i], s.unit) if s.ys[i] else "-" for s in curve.series))
    if curve.band:
        table.caption = safe_text(curve.band)
        table.caption_justify = "left"
    return table


def rate_text(rate: float) -> str:
    """A tokens/s figure in a few cells without scientific notation: 3 significant digits, whole numbers
    from 100, a k, M or G prefix from 10,000.

    Example: rate_text(7.234) -> "7.23"; rate_text(2345.6) -> "2,346"; rate_text(71862680683) -> "71.9 G"
    """
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if rate >= scale:
            value = rate / (scale if prefix != "k" else 1e3)
            return f"{value:,.3g} {prefix}" if value < 100 else f"{value:,.0f} {prefix}"
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def machines_table(rows: list[MachineRow], sort_key: str) -> Table:
    """Every profile: usable memory (what a model may fill), bandwidth, verdict, decode ceiling and realistic, first token, chips."""
    table = Table(box=None, padding=(0, 1), show_edge=False, title=f"every machine, modelled, by {sort_key} (s sorts)",
                  title_justify="left")
    table.add_column("machine", overflow="fold")
    for name in ("usable", "GB/s", "fits", "ceiling", "decode", "1st token"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        band = f"±{r.band * 100:.0f}%" if r.band is not None else "±?"
        speed = (rate_text(r.ceiling), f"{rate_text(r.realistic)}{band}", fmt(r.first_token, "s")) \
            if r.realistic is not None else ("-", "-", "-")
        name = safe_text(r.id) + (Text(f" x{r.chips:,}", style="dim") if r.chips else Text(""))
        table.add_row(name, fmt(r.memory_bytes, "B"), f"{r.bandwidth / 1e9:,.0f}", FIT_WORD[r.verdict], *speed)
    table.caption = ("usable: the memory a model may fill (the OS and other programs keep the rest); "
                     "ceiling and decode in tokens/s (mid-answer); ±: decode's band, the fitted model's error on "
                     "machines left out (±?: roofline only, no band); x N: SRAM chips the request needs")
    table.caption_justify = "left"
    return table


def race_lines(lanes: list[Lane], pieces: list[str], t: float, width: int) -> Text:
    """One line per lane: name, rate, and the tail of the answer it has written by `t` seconds."""
    out = Text(no_wrap=True, overflow="ellipsis")
    # two lines: one was cut at 80 columns
    out.append(f"the answer ({count(len(pieces), 'token')}) at each machine's speed; {t:.1f} s (w again: leave)\n"
               "±?: no band (the machines table, m, says why)\n", style="bold")
    name = min(max([RACE_NAME, *(len(lane.label) for lane in lanes)]), RACE_NAME_MAX)  # "here (numpy, measured)"
    for lane in lanes:
        n = tokens_shown(lane, t, len(pieces))
        written = "".join(pieces[:n]).replace("\n", " ")
        end = f" done {fmt(finish_time(lane, len(pieces)), 's')}" if n == len(pieces) else ""
        room = max(width - name - RACE_LABEL - len(end) - 3, 8)
        band = f"±{lane.band * 100:.0f}%" if lane.band is not None else ("±?" if lane.modelled else "")
        out.append(f"{lane.label[:name]:<{name}} {rate_text(lane.tokens_per_s):>9}/s {band:>5} ", style="bold" if n else "dim")
        out.append_text(safe_text(written[-room:]))
        out.append(end + "\n", style="dim")
    return out

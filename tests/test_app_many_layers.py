"""Many layers and many experts on screen: the live panel keeps its candidates, the experts grids their labels.

Models are written by `layered_models.write_model` (random weights, tiny widths): 30 and 64 layers
(MoE, dense, and gemma3 with five sliding-window layers per full one) and 8, 64 and 256 experts.
Every check reads a widget's content drawn at the widget's own width and height (what the terminal
shows of it), and every expected figure comes from the run's `Step` records.
"""

from __future__ import annotations

import io
import re

import pytest
from app_support import SIZES, app_for, settle, shown_text, stage_key
from layered_models import write_model
from rich.console import Console

from walkthrough.engine.layer_groups import (
    cache_groups,
    lit_per_cell,
    per_cell,
    ranges,
    ranges_text,
)
from walkthrough.screens.live import CANDIDATES, PIECE_CHARS
from walkthrough.textsafe import token_text

PREFILL, DECODE = (stage_key(stage) for stage in ("prefill", "decode"))
MESSAGES = [{"role": "user", "content": "hello"}]
MODELS = {"dense-64": {"n_layers": 64, "arch": "qwen2"},
          "gemma3-30": {"n_layers": 30, "arch": "gemma3"}, "moe-64x8": {"n_layers": 64},
          "experts-8": {"n_layers": 3, "n_experts": 8}, "experts-64": {"n_layers": 3, "n_experts": 64, "n_used": 4},
          "experts-256": {"n_layers": 6, "n_experts": 256, "n_used": 8}}
ROW = re.compile(r"^\s*L(\d+) (\S+)(?: +(\d+)/(\d+))?\s*$")  # an experts grid row: label, cells, count


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    where = tmp_path_factory.mktemp("layered")
    return {name: write_model(where / f"{name}.gguf", **options) for name, options in MODELS.items()}


def drawn(widget) -> list[str]:
    """The widget's content as the terminal shows it: drawn at its width, cut to its height."""
    console = Console(width=widget.size.width, file=io.StringIO(), record=True, color_system=None)
    console.print(widget.content)
    lines = console.export_text(styles=False).rstrip("\n").split("\n")
    return [line.rstrip() for line in lines]


async def _passes(pilot, n: int) -> None:
    for _ in range(n):
        await pilot.press("space")
        await settle(pilot)


def _assert_candidates_shown(app) -> None:
    live = app.screen.query_one("#live")
    lines = drawn(live)
    assert len(lines) <= live.size.height, f"{len(lines)} lines in a panel {live.size.height} high"
    step = app.state.last_step
    for token_id, p in step.top(CANDIDATES):
        piece = token_text(app.state.piece(token_id), PIECE_CHARS)
        assert any(piece in line and f"{token_id}" in line and f"{p:.3f}" in line for line in lines), piece
    assert "next token" in shown_text(app)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("name", ["dense-64", "gemma3-30", "moe-64x8"])
async def test_live_panel_keeps_the_candidates_whatever_the_layer_count(models, name, size):
    app = app_for(models[name], MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(DECODE)
        await _passes(pilot, 1)  # the prompt in one pass
        _assert_candidates_shown(app)
        await _passes(pilot, 1)  # one token
        _assert_candidates_shown(app)
        step = app.state.last_step
        live = "\n".join(drawn(app.screen.query_one("#live")))
        detail = "\n".join(drawn(app.screen.query_one("#decode-detail")))
        kinds = {t.mixer for t in step.layers}
        for shown in ([detail, live] if size == SIZES["large"] else [detail]):  # 80x24: the strip has no room
            for group in cache_groups(step.layers):
                if len(kinds) > 1:
                    assert f"{group.letter} {group.kind}" in shown
                layers = ranges_text(group.layers)
                assert (layers if len(layers) <= 12 else f"{len(group.layers)} layers") in shown
        if len(kinds) > 1:  # one letter per layer: which layer slides
            strip = "layers " + "".join(g.letter for t in step.layers for g in cache_groups([t]))
            assert strip in detail.replace("\n", "")


def test_cache_groups_partition_the_layers_and_add_up(models):
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.glassbox.session import Session
    from walkthrough.engine.sampler import Sampler
    from walkthrough.inspect.gguf import open_gguf

    model = Model(open_gguf(models["gemma3-30"]))
    step = list(Session(model).prefill(list(range(1, 12)), sampler=Sampler.greedy()))[-1]
    groups = cache_groups(step.layers)
    assert sorted(i for g in groups for i in g.layers) == list(range(30))
    assert {g.kind for g in groups} == {"full", "sliding"}
    assert [i for g in groups if g.kind == "full" for i in g.layers] == [5, 11, 17, 23, 29]  # llama.cpp's period 6
    assert sum(g.total_bytes for g in groups) == step.kv_bytes + step.state_bytes
    for g in groups:
        traces = [step.layers[i] for i in g.layers]
        assert {(t.mixer, t.kv_len, t.kv_bytes) for t in traces} == {(g.kind, g.kv_len, g.bytes_each)}
    assert ranges([0, 1, 2, 4, 6, 7]) == [(0, 2), (4, 4), (6, 7)] and ranges_text([0, 1, 2, 4]) == "0-2,4"


def test_experts_binned_per_cell():
    assert per_cell(256, 64) == 4 and per_cell(8, 64) == 1 and per_cell(256, 0) == 256
    assert lit_per_cell([0, 2, 0, 0, 1, 1, 0, 0], 4).tolist() == [1, 2]
    assert lit_per_cell([1, 0, 3], 2).tolist() == [1, 1]  # the last cell holds what is left


def _grid(lines: list[str], title: str) -> tuple[list[re.Match], str]:
    """The grid rows under `title` and the legend after them (up to the next blank line).

    The live panel's strip at 80 columns lays sections side by side: the grid's column is cut out,
    from its title to the next section's ("next token")."""
    start = next(i for i, line in enumerate(lines) if title in line)
    column = lines[start].index(title)
    end = lines[start].find("next token", column)
    rows, legend = [], []
    for line in lines[start + 1:]:
        line = line[column:end] if end > 0 else line[column:]
        match = ROW.match(line)
        if match and not legend:
            rows.append(match)
        elif line.strip() and not line.strip().startswith(("bytes read", "the prompt")):
            legend.append(line.strip())
        else:
            break
    return rows, " ".join(legend)


def _check_grid(rows: list[re.Match], legend: str, step, n_experts: int, *, last_token_only: bool,
                counts: bool) -> None:
    """Labels, counts, every glyph in the legend, and each cell's figure from the layer's routing."""
    moe = [t for t in step.layers if t.experts is not None]
    labels = [int(m.group(1)) for m in rows]
    if "not shown" not in legend:
        assert labels == [t.index for t in moe]
    assert labels == [t.index for t in moe][: len(labels)] and labels
    for match in rows:
        layer = step.layers[int(match.group(1))]
        chosen = layer.experts[-1:] if last_token_only else layer.experts  # [rows, k] from the router
        lit = len(set(chosen.ravel().tolist()))
        if counts:
            assert (int(match.group(3)), int(match.group(4))) == (lit, n_experts)
        cells = match.group(2)
        k = -(-n_experts // len(cells))
        meanings = legend.replace(f"{k} experts a cell:", "").replace(f"all {k}", "")  # digits of k itself
        for glyph in set(cells):
            assert glyph in meanings, f"{glyph!r} not in the legend {legend!r}"
        expected = []
        for c in range(len(cells)):  # per cell: how many of its experts were chosen (or tokens, one expert a cell)
            members = range(c * k, min((c + 1) * k, n_experts))
            if k == 1:
                expected.append(int((chosen == c).sum()))
            else:
                expected.append(sum(1 for e in members if (chosen == e).any()))
        figures = [0 if g == "\u00b7" else (max(1, k)) if g == "\u2588" else 10 if g == "+" else int(g)
                   for g in cells]
        assert [min(f, 10) for f in figures] == [min(e, 10) for e in expected]
        if k > 1:
            assert f"{k} experts a cell" in legend


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("name", ["experts-8", "experts-64", "experts-256"])
async def test_experts_grids_keep_labels_counts_and_a_legend_for_every_glyph(models, name, size):
    n_experts = MODELS[name]["n_experts"]
    app = app_for(models[name], MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(PREFILL)
        await _passes(pilot, 1)
        step = app.state.last_step
        widget = app.screen.query_one("#prefill-experts")
        lines = drawn(widget)
        assert max(len(line) for line in lines) <= widget.size.width
        rows, legend = _grid(lines, "experts woken by this chunk")
        _check_grid(rows, legend, step, n_experts, last_token_only=False, counts=True)
        live = drawn(app.screen.query_one("#live"))
        rows, legend = _grid(live, "experts woken by the pass")
        _check_grid(rows, legend, step, n_experts, last_token_only=False, counts=False)

        await pilot.press(DECODE)
        await _passes(pilot, 1)
        step = app.state.last_step
        rows, legend = _grid(drawn(app.screen.query_one("#decode-detail")), "experts lit for this token")
        _check_grid(rows, legend, step, n_experts, last_token_only=True, counts=True)
        _assert_candidates_shown(app)

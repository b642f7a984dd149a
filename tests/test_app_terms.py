"""The glossary and the help: every term has an entry, each stage's terms line lists only what the stage shows,
`g` opens the term under the cursor, help starts with the explanation, long metadata values open whole, and
Decode says when its attention view is below the fold. Pilot at 80x24 and 120x40."""

from __future__ import annotations

import re

import pytest
from app_support import SIZES, app_for, copy_gguf, press_stage, settle, stage_key, widget_text
from rich.console import Console
from textual.widgets import DataTable, Static

from walkthrough.render.terms import load_terms
from walkthrough.request import stages
from walkthrough.screens.base import TermsLine
from walkthrough.screens.glossary import GlossaryScreen
from walkthrough.screens.help import HelpScreen, unwrap
from walkthrough.screens.metadata_value import MAX_BYTES, MetadataValueScreen
from walkthrough.textsafe import visible

DENSE = "ref-qwen2-f32.gguf"
MOE = "ref-qwen3moe-q8_0.gguf"
MOE_TERMS = {"MoE", "expert", "router"}

# The list (issue 13, "The glossary"): each must have its own entry.
REQUIRED = [
    "softmax", "output head", "scale", "group size", "k-quants", "outlier", "tied embeddings", "shard", "loss",
    "perplexity", "KL divergence", "top-1 agreement", "MLA", "MXFP4", "BF16", "FP16", "FP32", "FP8", "imatrix",
    "mixed precision", "safetensors", "hidden size", "speculative decoding", "prompt lookup", "prefix caching",
    "sliding window",
]
# Issue 31 item 13, the source glossary's terms that were absent, and diffusion models (item 12).
REQUIRED_31 = [
    "abliteration", "AWQ", "calibration data", "config.json", "data-free quantization", "E2M1", "EXL3", "exponent",
    "GPTQ", "gradient", "GRPO", "harness", "LoRA", "mantissa", "MLX", "NVFP4", "OpenEnv", "QLoRA", "recipe",
    "RL environment", "RTN", "SFT", "zero point", "diffusion model",
]
# How the issue names them, and what a reader types: each must find its entry by words.
NAMES = {"lm_head": "output head", "top-5 agreement": "top-1 agreement", "F16": "FP16", "Q4_K": "k-quants",
         "embedding width": "hidden size", "sliding-window": "sliding window",
         "Abliteration": "abliteration", "Calibration data": "calibration data", "E2M1 (FP4)": "E2M1",
         "FP4": "E2M1", "Harness (agent scaffold)": "harness", "RTN (round to nearest)": "RTN",
         "round-to-nearest": "RTN", "Zero point": "zero point", "Data-free quantization": "data-free quantization",
         "QLoRA": "QLoRA", "LoRA": "LoRA", "NVFP4": "NVFP4", "diffusion": "diffusion model",
         "keep-alive": "keep-alive", "n-grams": "n-gram", "last n tokens": "n-gram", "3 hosts": "pipeline split"}


def test_every_listed_term_has_an_entry():
    from walkthrough.render.term_words import terms_in

    terms = load_terms()
    missing = [key for key in REQUIRED + REQUIRED_31 if key not in terms]
    assert not missing, f"glossary lacks {missing}"
    for name, key in NAMES.items():
        assert terms_in(name) == (key,), name
    for term in terms.values():
        assert term.text and term.words, term.key
        for word in term.words:  # no word is claimed by two terms, or swallowed by a longer one
            assert word.startswith("re:") or terms_in(word) == (term.key,), (term.key, word)
        assert all(s in terms for s in term.see), f"{term.key} points to a missing term"
        assert term.key not in term.see


def _app(fixtures_dir, model: str):
    """The app on a reference model, its answer capped at three tokens."""
    app = app_for(fixtures_dir / "reference" / model)
    app.state.max_new_tokens = 3
    return app


def _select(table: DataTable, key: str) -> int:
    """Put the table's cursor on the row with this key; its index."""
    row = [r.key.value for r in table.ordered_rows].index(key)
    table.move_cursor(row=row)
    return row


def _stage_text(app, screen) -> str:
    """What the stage shows, read independently of the terms line's own reader: every Static but the
    stage bar and the terms line, table headings, the stage's label."""
    parts = [screen.stage.label]
    for widget in screen.query(Static):
        if widget.id not in ("stage-bar", "terms-line") and widget.content is not None:
            parts.append(widget_text(widget))
    parts += [str(c.label) for table in screen.query(DataTable) for c in table.columns.values()]
    return "\n".join(parts).lower()


def _occurs(key: str, text: str) -> bool:
    words = load_terms()[key].words
    return any(re.search(w[3:], text, re.IGNORECASE) if w.startswith("re:")
               else re.search(rf"(?<!\w){re.escape(w.lower())}", text) for w in words)


async def _walk_stages(pilot) -> dict[str, tuple[tuple[str, ...], str]]:
    """Each stage's terms line and text, after one decode pass."""
    app = pilot.app
    await press_stage(pilot, "decode", "space", "space")
    await settle(pilot)
    seen = {}
    for stage in stages.STAGES:
        await pilot.press(str(stage.number))
        await settle(pilot)
        screen = app.screen
        seen[stage.id] = (screen.terms, _stage_text(app, screen))
        line = screen.query_one(TermsLine)
        console = Console(width=line.content_region.width)
        lines = line.content.wrap(console, line.content_region.width)
        assert len(lines) == line.content_region.height <= line.max_lines, f"{stage.id}: the terms line is cut"
        shown = " ".join(" ".join(text.plain for text in lines).split()).removeprefix("Terms (g): ")
        more = re.search(r" \+(\d+) more \(g\)$", shown)
        listed = [t.strip() for t in shown[: more.start() if more else None].split("·")]
        hidden = int(more.group(1)) if more else 0  # every term listed whole, or counted in "+N more (g)"
        assert tuple(listed) + screen.terms[len(listed):] == screen.terms, (stage.id, shown)
        assert len(listed) + hidden == len(screen.terms), (stage.id, shown)
    return seen


@pytest.mark.parametrize("model", [DENSE, MOE])
async def test_terms_line_lists_only_what_the_stage_shows(fixtures_dir, model):
    app = _app(fixtures_dir, model)
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        seen = await _walk_stages(pilot)
    for stage_id, (terms, text) in seen.items():
        assert terms, stage_id
        absent = [key for key in terms if not _occurs(key, text)]
        assert not absent, f"{stage_id} lists terms it does not show: {absent}"
    listed = {key for terms, _ in seen.values() for key in terms}
    if model == DENSE:
        assert not listed & MOE_TERMS, "MoE terms on a dense model"
    else:
        for stage_id in ("prefill", "decode"):
            assert "expert" in seen[stage_id][0], stage_id
    assert {"prefill", "KV cache"} <= set(seen["prefill"][0])
    assert {"decode", "attention"} <= set(seen["decode"][0])
    assert {"temperature", "top-k"} <= set(seen["sampling"][0])


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_g_opens_the_term_under_the_cursor(fixtures_dir, size):
    app = _app(fixtures_dir, MOE)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("v", "v")  # File -> Metadata
        table = app.screen.query_one("#metadata-table", DataTable)
        _select(table, "qwen3moe.context_length")
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GlossaryScreen)
        assert app.screen.current.key == "context length"
        assert app.screen.under[0] == "context length"
        await pilot.press("escape")
        _select(table, "qwen3moe.attention.head_count_kv")
        await pilot.press("g")
        await pilot.pause()
        assert app.screen.under[:2] == ("GQA", "attention")  # the most specific word first
        await pilot.press("escape")
        await pilot.press("v")  # Overview: no cursor, the screen's terms first
        await pilot.press("v")  # Tensors
        _select(app.screen.query_one("#tensor-table", DataTable), "blk.0.ffn_gate_exps.weight")
        await pilot.press("g")
        await pilot.pause()
        assert app.screen.current.key == "expert"
        await pilot.press("escape", stage_key("tokens"))
        await settle(pilot)
        assert app.state.chat.tokens[0].special
        on_screen = app.screen.terms
        await pilot.press("g")
        await pilot.pause()
        assert app.screen.current.key == "special token"
        assert app.screen.first == on_screen  # then the terms on this screen, in screen order
        await pilot.press("escape", "right", "g")
        await pilot.pause()
        assert app.screen.current.key == ("special token" if app.state.chat.tokens[1].special else "token")


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_help_opens_on_the_explanation(fixtures_dir, size):
    app = _app(fixtures_dir, DENSE)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for stage_id in ("file", "decode"):
            await pilot.press(stage_key(stage_id), "question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            text = widget_text(app.screen.query_one("#help-text", Static))
            first = " ".join(unwrap(app.screen.stage.HELP).split()[:6])
            assert first in " ".join(text.split()[:40]), "the explanation comes first"
            assert " ".join(text.split()).index(first) < text.index("Keys") < text.index("Quit")
            await pilot.press("escape")


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_enter_opens_a_long_metadata_value_whole(fixtures_dir, tmp_path, size):
    # 77 KB: over the reader's eager limit (read on demand), under the view's 256 KiB: shown whole
    hostile = "line one\n\x1b]0;pwned\x07 [bold]not markup[/bold] " + "long value " * 7000 + "THE END"
    huge = "y" * (MAX_BYTES + 1000) + "TAIL"
    path = copy_gguf(fixtures_dir / "reference" / DENSE, tmp_path / "long.gguf",
                     {"general.description": hostile, "general.notes": huge})
    app = app_for(path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("v", "v")
        table = app.screen.query_one("#metadata-table", DataTable)
        cut = table.get_row_at(_select(table, "general.description"))[2].plain
        assert cut.endswith("…") and "THE END" not in cut
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MetadataValueScreen)
        shown = app.screen.query_one("#metadata-value", Static).content.plain
        assert visible(hostile, keep_newlines=True) in shown
        assert "\x1b" not in shown and "\\x1b]0;pwned\\x07" in shown
        await pilot.press("end")
        await pilot.press("escape")
        assert app.screen.query_one("#metadata-table") is table
        _select(table, "general.notes")
        await pilot.press("enter")
        await pilot.pause()
        shown = app.screen.query_one("#metadata-value", Static).content.plain
        assert f"{len(huge):,} bytes (the first {MAX_BYTES:,} shown)" in shown and "TAIL" not in shown
        assert shown.endswith("y" * 100)
        await pilot.press("escape")
        _select(table, "tokenizer.ggml.tokens")
        await pilot.press("enter")
        await pilot.pause()
        shown = app.screen.query_one("#metadata-value", Static).content.plain
        n = app.state.file.fields["tokenizer.ggml.tokens"].count
        assert f"{n:,} items" in shown and shown.rstrip().splitlines()[-1].split()[0] == str(min(n, 2000) - 1)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_decode_says_the_attention_view_is_below(fixtures_dir, size):
    app = _app(fixtures_dir, DENSE)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "decode", "space", "space")
        await settle(pilot)
        screen = app.screen
        main, view, hint = (screen.query_one(s) for s in ("#stage-main", "#decode-attention", "#decode-hint"))

        def in_view() -> bool:
            return main.scroll_y <= view.virtual_region.y < main.scroll_y + main.scrollable_content_region.height

        assert "most attended" in widget_text(view)
        assert hint.visible == (not in_view())
        if size == SIZES["small"]:
            assert hint.visible and "j jumps" in widget_text(hint)
        await pilot.press("j")
        await pilot.pause()
        assert in_view() and not hint.visible
        if main.max_scroll_y:
            await pilot.press("j")
            await pilot.pause()
            assert main.scroll_y == 0


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_g_over_a_block_or_the_attention_map_lists_their_terms(fixtures_dir, size):
    app = _app(fixtures_dir, MOE)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("v")  # File -> Tensors
        _select(app.screen.query_one("#tensor-table", DataTable), "blk.0.attn_q.weight")  # Q8_0: one scale per 32
        await pilot.press("enter")
        await settle(pilot)
        block = app.screen
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GlossaryScreen) and app.screen.first == block.terms
        assert {"scale", "quantization"} <= set(block.terms)
        await pilot.press("escape", "escape", stage_key("decode"), "space", "a")
        await settle(pilot)
        attention = app.screen
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GlossaryScreen) and "attention" in app.screen.first
        assert app.screen.first == attention.terms


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_the_newer_views_name_their_terms(fixtures_dir, size):
    """The several-hosts view (Costs, x) showed a split over hosts the glossary had no entry for (so did the
    lifecycle's keep-alive and the Speculate search's n-grams: NAMES)."""
    app = app_for(fixtures_dir / "reference" / DENSE)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "costs", "x")
        await settle(pilot)
        assert "pipeline split" in app.screen.terms, app.screen.terms

"""Pilot tests of the File stage: overview figures from the card, the tensor filter, long tables a page at a
time, odd and hostile files."""

from __future__ import annotations

import pytest
from app_support import (
    SIZES,
    app_for,
    open_tensor_table,
    press_stage,
    reference_app,
    screen_text,
    settle,
    shown_text,
)
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V
from gguf_builder import Tensor, write_gguf
from textual.widgets import DataTable

from walkthrough.inspect.card import build_card, tensor_group
from walkthrough.inspect.gguf import open_gguf
from walkthrough.textsafe import visible


async def test_overview_shows_the_cards_figures(fixtures_dir):
    path = fixtures_dir / "reference" / "ref-qwen3moe-q8_0.gguf"
    with open_gguf(path) as f:
        card = build_card(f)
        n_tensors, n_keys = len(f.tensors), len(f.fields)
    app = app_for(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = shown_text(app)
    assert f"{n_keys} metadata keys, {n_tensors} tensors" in text
    assert card.architecture in text
    assert f"{card.bits_per_weight:.2f} bits per weight" in text
    assert f"{card.n_experts} routed, {card.n_experts_used} used per token" in text
    assert "The numpy engine can run this file" in text


async def test_tensor_filter_keeps_matching_rows(fixtures_dir):
    path = fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf"
    with open_gguf(path) as f:
        names = list(f.tensors)
        expected = sum(1 for n in names if "exps" in n or "exps" in tensor_group(n))
    app = app_for(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#tensor-table", DataTable)
        assert table.row_count == len(names)
        await pilot.press("slash", *"exps", "enter")
        await pilot.pause()
        assert 0 < expected < len(names)
        assert table.row_count == expected
        assert app.screen.focused is table  # enter leaves the filter, so n/p move stages again



async def test_a_typed_filter_applies_once_typing_pauses_and_at_once_on_escape(fixtures_dir, monkeypatch):
    from walkthrough.render import tensor_pages

    path = fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf"
    with open_gguf(path) as f:
        names = list(f.tensors)
    scans: list[str] = []
    matching = tensor_pages.TensorFilter.matching

    def counted(self, needle):
        scans.append(needle)
        return matching(self, needle)

    monkeypatch.setattr(tensor_pages.TensorFilter, "matching", counted)
    app = app_for(path)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await open_tensor_table(pilot)
        scans.clear()
        await pilot.press("slash", *"exps")
        for _ in range(100):  # until the pause after typing has run the filter on the whole text (on a loaded
            if scans and scans[-1] == "exps":  # machine the keys can come slowly enough for a pause after "exp")
                break
            await pilot.pause(0.05)
        await pilot.pause()
        assert scans[-1] == "exps"
        assert table.row_count == sum(1 for n in names if "exps" in n or "exps" in tensor_group(n))
        await pilot.press(*"xyz", "escape")  # escape leaves the filter with what it holds applied
        assert scans[-1] == "expsxyz" and table.row_count == 0
        assert app.screen.focused is table

async def test_views_cycle_with_v(fixtures_dir):
    path = fixtures_dir / "reference" / "ref-llama-q4_0.gguf"
    with open_gguf(path) as f:
        n_vocab = f.fields["tokenizer.ggml.tokens"].count
    app = app_for(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        assert "attn_q.weight" in shown_text(app)
        await pilot.press("v")
        await pilot.pause()
        text = shown_text(app)
        assert "general.architecture" in text
        assert f"{n_vocab} items: [" in text  # the vocabulary summarised, not dumped


async def test_vocabulary_only_file_opens_and_says_it_cannot_run(fixtures_dir):
    path = fixtures_dir / "vocab" / "ggml-vocab-llama-spm.gguf"
    with open_gguf(path) as f:
        n_keys = len(f.fields)
    app = app_for(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = shown_text(app)
    assert f"{n_keys} metadata keys, 0 tensors" in text
    assert "The engine cannot run this file" in text
    assert "(it holds no tensors at" in text and "all: a vocabulary-only file)" in text  # the engine's reason


async def test_hostile_metadata_is_shown_literally(tmp_path):
    name = "[bold red]boom[/] \x1b]0;pwned\x07"
    path = tmp_path / "hostile.gguf"
    write_gguf(
        path,
        {"general.architecture": (V.STRING, "llama"), "general.name": (V.STRING, name)},
        [Tensor("token_embd.weight", (32, 4), Q.F32)],
    )
    app = app_for(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = shown_text(app)
    assert visible(name) in text  # markup kept as characters, the escape made visible
    assert "\x1b]0;" not in text


async def test_a_file_that_is_not_gguf_ends_the_app_with_one_line(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"this is not a model file at all" * 4)
    app = app_for(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
    assert app.return_code == 2
    assert app.error and "notes.gguf" in app.error and "\n" not in app.error


async def test_a_failing_part_leaves_the_file_stage_up(fixtures_dir, monkeypatch):
    from walkthrough.request import parts

    def broken(f):
        raise RuntimeError("tokenizer exploded")

    monkeypatch.setattr(parts, "build_tokenizer", broken)
    app = app_for(fixtures_dir / "reference" / "ref-qwen2-f32.gguf")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "tokenizer exploded" in app.state.unavailable["tokenizer"]
        assert "bits per weight" in shown_text(app)
        await press_stage(pilot, "tokens")
        await pilot.pause()
        assert "tokenizer exploded" in shown_text(app)


async def test_overview_scrolls_with_the_keyboard_at_80x24(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen3moe-q8_0.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "Quant mix" not in screen_text(app)  # below the fold: read the terminal's picture
        await pilot.press("end")
        await pilot.pause()
        assert "Quant mix" in screen_text(app) and "Q8_0" in screen_text(app)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_a_long_tensor_table_shows_a_page_at_a_time(fixtures_dir, monkeypatch, size):
    from walkthrough.render import tensor_pages
    from walkthrough.screens import table_pages

    monkeypatch.setattr(table_pages, "PAGE_ROWS", 4)  # the fixture's 37 tensors make 10 pages, its 6 experts 2
    path = fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf"
    with open_gguf(path) as f:
        in_order = [r.tensor.name for r in tensor_pages.ordered_rows(f)]
        experts = [n for n in in_order if "exps" in n or "exps" in tensor_group(n)]
    app = app_for(path)
    async with app.run_test(size=size) as pilot:
        table = await open_tensor_table(pilot)

        def shown() -> list[str]:
            return [row.key.value for row in table.ordered_rows]

        assert shown() == in_order[:4]
        assert f"tensors 1-4 of {len(in_order)} ([ and ] for the other pages)" in shown_text(app)
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert shown() == in_order[4:8]
        assert f"tensors 5-8 of {len(in_order)}" in shown_text(app)
        await pilot.press("left_square_bracket", "left_square_bracket")  # back past the first page: the last
        await pilot.pause()
        last = (len(in_order) - 1) // 4 * 4
        assert shown() == in_order[last:]
        await pilot.press("slash", *"exps", "enter")  # a filter starts again at its first page
        await pilot.pause()
        assert shown() == experts[:4]
        assert f"tensors 1-4 of {len(experts)} matching (of {len(in_order)})" in shown_text(app)
        await pilot.press("enter")  # the block view works on a paged row
        await pilot.pause()
        assert type(app.screen).__name__ == "BlockScreen"


async def test_a_short_tensor_table_has_no_pages(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-llama-f32.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await pilot.pause()
        assert not app.screen.query_one("#tensor-page").display
        assert app.screen.check_action("page", (1,)) is False  # no page keys in the footer
        assert "Next page" not in shown_text(app)


@pytest.fixture(scope="module")
def many_keys(tmp_path_factory):
    """The llama reference with 2,500 more metadata keys (three pages of the table), mixed types; key 1,500
    names a glossary term."""
    from hostile_support import with_many_keys

    path = with_many_keys(tmp_path_factory.mktemp("keys"), "many-keys.gguf", 2500,
                          key=lambda i: f"extra.{i}.{'context_length' if i == 1500 else 'value'}")
    with open_gguf(path) as f:
        keys = list(f.fields)
    return path, keys


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_a_long_metadata_table_shows_a_page_at_a_time(many_keys, size):
    from walkthrough.render.term_words import most_specific
    from walkthrough.screens import table_pages
    from walkthrough.screens.glossary import GlossaryScreen
    from walkthrough.screens.metadata_value import MetadataValueScreen
    from walkthrough.screens.stage_text import cursor_row_text

    path, keys = many_keys
    per_page = table_pages.PAGE_ROWS
    assert len(keys) > 2 * per_page
    app = app_for(path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("v", "v")
        await pilot.pause()
        table = app.screen.query_one("#metadata-table", DataTable)

        def shown() -> list[str]:
            return [row.key.value for row in table.ordered_rows]

        assert shown() == keys[:per_page]
        assert f"keys 1-{per_page:,} of {len(keys):,} ([ and ] for the other pages)" in shown_text(app)
        assert app.screen.check_action("page", (1,)) is True
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert shown() == keys[per_page:2 * per_page]
        assert f"keys {per_page + 1:,}-{2 * per_page:,} of {len(keys):,}" in shown_text(app)

        # Enter opens the value of the key under the cursor, on a page past the first.
        key = next(k for k in shown() if k.endswith("context_length"))
        table.move_cursor(row=shown().index(key))
        await pilot.press("g")  # the term under the cursor, read from the row on show
        await pilot.pause()
        assert isinstance(app.screen, GlossaryScreen)
        assert app.screen.under[0] == "context length"
        await pilot.press("escape")
        under = most_specific(cursor_row_text(table))
        assert under and under[0] == "context length"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MetadataValueScreen) and app.screen.key == key
        with open_gguf(path) as f:
            value = str(f.get(key))
        assert value in app.screen.query_one("#metadata-value").content.plain
        await pilot.press("escape")

        await pilot.press("left_square_bracket", "left_square_bracket")  # back past the first page: the last
        await pilot.pause()
        last = (len(keys) - 1) // per_page * per_page
        assert shown() == keys[last:]
        assert f"keys {last + 1:,}-{len(keys):,} of {len(keys):,}" in shown_text(app)
        await pilot.press("v", "v")  # the tensors view has one page: no page keys there
        await pilot.pause()
        assert app.screen.check_action("page", (1,)) is False


async def test_a_short_metadata_table_has_no_pages(fixtures_dir):
    path = fixtures_dir / "reference" / "ref-llama-f32.gguf"
    with open_gguf(path) as f:
        keys = list(f.fields)
    app = app_for(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("v", "v")
        await pilot.pause()
        assert [row.key.value for row in app.screen.query_one("#metadata-table", DataTable).ordered_rows] == keys
        assert not app.screen.query_one("#metadata-page").display
        assert app.screen.check_action("page", (1,)) is False
        assert "Next page" not in shown_text(app)


def _plain_filter(rows, needle: str) -> list:
    """The filter's definition, scanned in full: the rows whose name, group or type contains the needle."""
    needle = needle.lower().strip()
    return [r for r in rows if not needle or needle in r.tensor.name.lower() or needle in r.group
            or needle in r.tensor.type_name.lower()]


def test_the_tensor_filter_keeps_what_a_plain_scan_keeps(tmp_path):
    from hostile_support import with_many_tensors

    from walkthrough.render.tensor_pages import TensorFilter, ordered_rows

    with open_gguf(with_many_tensors(tmp_path, "many.gguf", 3000)) as f:
        rows = ordered_rows(f)
    search = TensorFilter(rows)
    # Typing on (each needle narrows the last), deleting, starting again, case, spaces, groups and types.
    typed = [*(("extra.12"[:i]) for i in range(1, 9)), "extra.1", "extra.", "EXTRA.2", "blk.1", "blk.1.",
             "Blk.1.attn", "norm", "NORM ", " f32", "f3", "f32", "attn", "xyz", "xyzz", "", "weight", "ight",
             "q", "token_embd", "output", "12.w", "2.weight"]
    for needle in typed:
        assert search.matching(needle) == _plain_filter(rows, needle), needle


async def test_a_greyed_key_says_what_it_needs():
    # i (Images) without --mmproj and b (Block) off the Tensors view greyed in the footer and did nothing
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key, needs in (("i", "--mmproj"), ("b", "Tensors view")):
            app.clear_notifications()
            await pilot.press(key)
            await pilot.pause()
            said = [n.message for n in app._notifications]
            assert len(said) == 1 and needs in said[0], (key, said)

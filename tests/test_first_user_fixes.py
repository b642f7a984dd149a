"""What a first user tripped over on real files (issue 28, items 5-11), each pinned by a test that failed
before its fix; screen ones at 80x24 and 120x40, reading widget content."""

from __future__ import annotations

import pytest
from app_support import SIZES, app_for, press_stage, settle, widget_text
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType as V
from gguf_builder import rewrite_gguf
from test_cli_errors import run_cli

REFERENCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What about warfarin?"}]


async def _shown_after(size, messages, key: str, widget: str) -> str:
    """The text of a widget after one key, in the app on the reference model."""
    from textual.widgets import Static

    app = app_for(REFERENCE, messages)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        return widget_text(app.screen.query_one(widget, Static))


async def _run_to_the_end(pilot, passes: int = 60) -> None:
    app = pilot.app
    for _ in range(passes):
        if app.state.finished:
            return
        reason = app.step_blocked()
        assert reason is None, reason
        app.action_step()
        await settle(pilot)
    raise AssertionError(f"the run did not end in {passes} passes")


@pytest.mark.parametrize("size", SIZES.values())
async def test_a_follow_up_counts_only_the_chunks_it_computes(fixtures_dir, size):
    """Item 5: "393 prompt tokens in 7 chunks" then "chunk 1 of 7: positions 371-392" for 22 computed tokens."""
    from textual.widgets import Static

    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES, max_tokens=1)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        state.chunk = 16
        app.restart()
        await settle(pilot)
        first = len(state.prompt_ids)
        await press_stage(pilot, "template")
        await _run_to_the_end(pilot)
        state.messages = [*state.messages, {"role": "assistant", "content": "Ok."},
                          {"role": "user", "content": "and aspirin?"}]
        app.rebuild_prompt()
        await settle(pilot)
        await press_stage(pilot, "prefill")
        await settle(pilot)
        before = widget_text(app.screen.query_one("#prefill-figures", Static))
        app.action_step()
        await settle(pilot)
        total, reused = len(state.prompt_ids), state.steps[0].reused
        computed = total - reused
        n_chunks = -(-computed // 16)
        assert reused == first and n_chunks < -(-total // 16)  # counting the reused tokens gives more
        text = widget_text(app.screen.query_one("#prefill-figures", Static))
    assert "(fewer if the KV cache holds its start)" in before
    assert f"chunk 1 of {n_chunks}: positions {reused}-{reused + 15}" in text
    assert f"({reused} reused from the KV cache)" in text


@pytest.mark.parametrize("size", [4, 6, 8, 24])  # rows: 2 per line, the app shows 4 lines at least
def test_the_window_of_rows_keeps_the_last_row_of_any_count(size):
    """Item 6: with an odd number of positions the matrix never drew the last row, even with the cursor on it."""
    from walkthrough.render.heatmap import window

    for length in range(1, 80):
        for cursor in (0, length // 2, length - 1):
            start, end = window(length, cursor, size)
            assert start <= cursor < end <= length and end - start <= size and start % 2 == 0, (length, cursor)
        assert window(length, length - 1, size)[1] == length


@pytest.mark.parametrize("size", SIZES.values())
async def test_the_matrix_shows_the_last_query_and_names_heads_as_decode_does(size):
    """Items 6 and 7: the attention matrix at the end of an odd-length run shows its last row; the Decode
    stage and the matrix name the same head the same way ("head 0 of 4", not "head 1/4" beside it)."""
    from textual.widgets import Static

    from walkthrough.inspect.locate import BUNDLED_MODEL
    from walkthrough.screens.attention import AttentionScreen

    app = app_for(BUNDLED_MODEL, [{"role": "user", "content": "What is the dose of warfarin for this patient?"}],
                  max_tokens=2)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        if len(state.prompt_ids) % 2:  # an odd count of positions at the end: prompt + the one token fed
            state.messages = [{"role": "user", "content": "What is the dose of warfarin for this patient ?"}]
            app.rebuild_prompt()
            await settle(pilot)
        await press_stage(pilot, "decode")
        await _run_to_the_end(pilot)
        n_head = state.model.config.n_head
        decode = widget_text(app.screen.query_one("#decode-attention", Static))
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AttentionScreen)
        length = state.attention_map().length
        assert length % 2 == 1
        view = widget_text(app.screen.query_one("#attention-view", Static))
    assert f"head 0 of {n_head}" in decode and f"head 1/{n_head}" not in decode
    assert f"head 0 of {n_head} (reads KV head" in view
    assert f"..{length - 1} down" in view  # the last query row is drawn


def test_four_calls_on_your_own_request_use_your_own_texts():
    """Item 8: --four-calls on your own prompt swapped in the bundled clinical texts for the edit and new chat."""
    import json

    from walkthrough.engine.serving.turns import FOUR_CALLS, FourCalls
    from walkthrough.inspect.locate import DEFAULT_REQUEST
    from walkthrough.inspect.template import load_messages

    clinical = json.loads(FOUR_CALLS.read_text(encoding="utf-8"))
    own = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}]
    script = FourCalls.for_request(own)
    edited, fresh = script.edited(own), script.fresh(own)
    assert edited[-1]["content"] == "Name a prime. Answer in one sentence."
    assert fresh == [own[0], {"role": "user", "content": script.follow_up}]
    sent = json.dumps([script.follow_up, edited, fresh])
    for text in (clinical["follow_up"], clinical["edit"]["replace"], clinical["new_conversation"][:40]):
        assert text not in sent
    assert FourCalls.for_request(load_messages(DEFAULT_REQUEST)) == FourCalls.load()


def test_trace_four_calls_on_your_own_prompt_says_what_it_sends(tmp_path, capsys):
    path = rewrite_gguf(REFERENCE, tmp_path / "long.gguf", {"qwen2moe.context_length": (V.UINT32, 2048)})
    code, _, err = run_cli(capsys, ["trace", path, "--prompt", "Name a prime.", "--four-calls", "--steps", "2",
                                      "--json"])
    assert code == 0, err
    assert err.count("\n") == 1 and "--four-calls on your own request: follow-up 'Please go on.'" in err


@pytest.mark.parametrize("size", SIZES.values())
async def test_speculate_offers_only_the_drafters_the_file_has(size):
    """Item 9: d offered the mtp drafter on a file without an MTP block (whose error then named CLI flags)."""
    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "speculate")
        await settle(pilot)
        assert app.state.card.n_mtp_layers == 0
        seen = {app.state.speculation.drafter}
        for _ in range(3):
            await pilot.press("d")
            await settle(pilot)
            seen.add(app.state.speculation.drafter)
    assert seen == {"lookup"}


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_every_key_a_stage_offers_is_in_its_footer_within_the_screen(size):
    """Item 10: at 80 columns keys vanished off the footer's end (Four calls and Unload on Chat, most Costs
    knobs), at 100 they ran under the palette key ("paletteU"). Every shown key's widget lies wholly on
    screen and clear of the palette key, or the footer ends with "? lists every key"."""
    from textual.widgets._footer import FooterKey, FooterLabel

    from walkthrough.request import stages

    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for stage in stages.STAGES:
            await pilot.press(str(stage.number))
            await settle(pilot)
            screen = app.screen
            shown = {b.action for _n, b, _e, _t in screen.active_bindings.values() if b.show}
            keys = list(screen.query(FooterKey))
            palette = [k for k in keys if k.has_class("-command-palette")]
            edge = palette[0].region.x if palette else size[0]
            listed = {k.action for k in keys if k.region.width and k.region.right <= edge}
            more = any("lists every key" in str(label.render()) for label in screen.query(FooterLabel))
            assert shown <= listed or more, (stage.label, sorted(shown - listed))


@pytest.mark.parametrize("command", ["inspect", "trace", "tokenize", "bench"])
def test_a_subcommand_s_usage_line_is_its_own(command, capsys):
    """Item 11: every subcommand's --help began with the app's usage glued to its own."""
    from walkthrough.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"usage: walkthrough {command} ") and "(opens the app)" not in first


@pytest.mark.parametrize("size", SIZES.values())
async def test_help_names_keys_as_the_footer_does_and_lists_n_and_p(size):
    """Item 11: help listed "slash" for / and left out n and p (tab and shift+tab took their rows)."""
    rows = (await _shown_after(size, MESSAGES, "question_mark", "#help-text")).splitlines()
    keys = {line.split("  ")[0].strip(): line for line in rows if "  " in line.strip()}
    assert any(k.startswith("/") for k in keys) and not any(k.startswith("slash") for k in keys)
    assert any("Next stage" in line and "n" in k.split(", ") for k, line in keys.items())
    assert any("Previous stage" in line and "p" in k.split(", ") for k, line in keys.items())


@pytest.mark.parametrize("size", SIZES.values())
async def test_the_tokens_stage_shows_a_newline_as_the_docs_say(size):
    """Item 11: the Tokens stage showed "\\n" where the docs promise "↵"."""
    strip = await _shown_after(size, [{"role": "user", "content": "first line\nsecond line"}], "3", "#token-strip")
    assert "↵" in strip and "\\n" not in strip


def test_trace_writes_rates_below_one_and_long_times_as_every_figure_is_written():
    """Item 11: "1 tokens/s" and "0 tokens/s" for rates under two, "1295 ms" for over a second."""
    from walkthrough.commands.trace_view import rate_line

    assert rate_line("prefill", 5, 5.6249, "numpy").startswith("prefill: 5 tokens in 5.62 s, 0.889 tokens/s (")
    assert rate_line("decode", 1, 1.295, "numpy").startswith("decode: 1 token in 1.29 s, 0.772 tokens/s (")
    assert rate_line("decode", 23, 0.4547, "numpy").startswith("decode: 23 tokens in 455 ms, 50.6 tokens/s (")


def test_the_machines_table_says_usable_memory_and_writes_rates_without_exponents():
    """Item 11: scientific notation in the machines table; its "memory" column is usable memory."""
    import io

    from rich.console import Console

    from walkthrough.costs.machines import MachineRow
    from walkthrough.screens.cost_views import machines_table

    row = MachineRow("fast-box", "Fast box", 24e9, 3.35e12, "fits", "", 12345.6, 2345.6, 0.012, None, 0.2)
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    console.print(machines_table([row], "decode"))
    text = console.export_text(styles=False)
    assert "usable" in text and "usable: the memory a model may fill" in text and "e+" not in text
    assert "12.3 k" in text and "2,346±20%" in text


@pytest.mark.parametrize("size", SIZES.values())
async def test_summary_lists_speculate_and_writes_flop_as_costs_does(size):
    """Item 11: Summary left out the Speculate stage, and wrote work as '1.2 M FLOPs' where Costs and the
    estimate write '1.2 MFLOP' (units.fmt)."""
    from textual.widgets import Static

    from walkthrough.engine.serving.rounds import round_stats
    from walkthrough.engine.steps import totals
    from walkthrough.units import fmt

    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "summary")
        await settle(pilot)
        table = widget_text(app.screen.query_one("#summary-table", Static))
        assert "Speculate" in table and "not run" in table
        await press_stage(pilot, "speculate")
        await settle(pilot)
        for _ in range(3):  # the prompt, then two rounds
            await pilot.press("space")
            await settle(pilot)
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        await press_stage(pilot, "summary")
        await settle(pilot)
        table = " ".join(widget_text(app.screen.query_one("#summary-table", Static)).split())
        spec = app.state.speculation
        stats = round_stats(spec.rounds)
        assert stats.rounds == 2
        assert (f"lookup drafter, k = {spec.k}: 2 passes" in table
                and f"alpha = {stats.accepted}/{stats.drafted} drafts" in table)
        assert f"{fmt(totals(app.state.prefill_steps).flops, 'FLOP')} computed" in table
        assert "FLOPs" not in table


async def test_summary_rows_follow_the_stage_numbers():
    """The Speculate row (stage 6) came after the Sampling row (stage 7)."""
    import re

    from textual.widgets import Static

    from walkthrough.request import stages

    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        await press_stage(pilot, "summary")
        await settle(pilot)
        table = widget_text(app.screen.query_one("#summary-table", Static))
        numbers = [int(m.group(1)) for line in table.splitlines() if (m := re.match(r"\s*(\d+) [A-Z]", line))]
        assert stages.number("sampling") in numbers and stages.number("speculate") in numbers
        assert numbers == sorted(numbers), table


async def test_a_key_group_s_label_is_within_the_screen():
    """At 80 columns Decode's footer ended '... a Attention  [] Laye': the layout counted a group of keys
    (p n Stage, [ ] Layer) a cell narrower than Textual draws it, so the row's last label ran off the edge."""
    from textual.widgets._footer import FooterKey, FooterLabel

    from walkthrough.request import stages

    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for stage in stages.STAGES:
            await pilot.press(str(stage.number))
            await settle(pilot)
            parts = [*app.screen.query(FooterKey), *app.screen.query(FooterLabel)]
            assert parts
            cut = [str(part.render()) for part in parts if part.region.width and part.region.right > 80]
            assert not cut, (stage.label, cut)


async def test_summary_costs_row_carries_the_bands():
    """Every modelled figure shows its band or says it has none: Summary's Costs row gave the first token and
    decode speed bare ('first token after 65.4 ms, decode 388 tokens/s')."""
    from textual.widgets import Static

    app = app_for(REFERENCE, MESSAGES)
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        await press_stage(pilot, "summary")
        await settle(pilot)
        table = " ".join(widget_text(app.screen.query_one("#summary-table", Static)).split())
        e = app.state.estimate()
        for band in (e.prefill.band, e.decode.band):
            want = f"±{band.fraction * 100:.0f}%" if band is not None and band.fraction is not None else "no band"
            assert want in table, table
        # the default machine's family has runs, but none of a model this small: no band, and Costs says why
        assert e.decode.band is not None and e.decode.band.describe().startswith("no band: extrapolated")

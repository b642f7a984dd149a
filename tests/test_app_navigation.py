"""Pilot tests of what every stage shares: moving between stages, help, glossary, the palette, the CLI."""

from __future__ import annotations

from app_support import app_for, press_stage, settle, shown_text, widget_text

from walkthrough import cli
from walkthrough.render.terms import load_terms
from walkthrough.request import stages
from walkthrough.screens.glossary import GlossaryScreen
from walkthrough.screens.help import HelpScreen


async def test_n_p_tab_and_numbers_move_between_stages(fixtures_dir):
    STAGE_IDS = stages.ids()
    app = app_for(fixtures_dir / "reference" / "ref-qwen2-f32.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.current_mode == STAGE_IDS[0]
        await pilot.press("n")
        assert app.current_mode == STAGE_IDS[1]
        await pilot.press("tab")
        assert app.current_mode == STAGE_IDS[2]
        await pilot.press("p", "shift+tab")
        assert app.current_mode == STAGE_IDS[0]
        await pilot.press("p")
        assert app.current_mode == STAGE_IDS[0]  # the first stage stays put
        await pilot.press(str(len(STAGE_IDS)))
        assert app.current_mode == STAGE_IDS[-1]
        await pilot.press("n")
        assert app.current_mode == STAGE_IDS[-1]


async def test_help_shows_the_stage_and_its_keys(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2-f32.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        stage = app.screen
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = widget_text(app.screen.query_one("#help-text"))  # the keys follow the explanation, below the fold
        assert stage.TITLE in shown_text(app) and "Terms" in text and "Quit" in text
        await pilot.press("escape")
        assert app.screen is stage


async def test_glossary_lists_the_stage_terms_first(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2-f32.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        terms = app.screen.terms
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GlossaryScreen)
        first = load_terms()[terms[0]]
        assert app.screen.current == first
        assert first.text.split()[0] in shown_text(app)
        await pilot.press("down")
        assert app.screen.current == load_terms()[terms[1]]
        await pilot.press("escape")
        assert not isinstance(app.screen, GlossaryScreen)


async def test_palette_lists_the_stages_and_the_stage_actions(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2-f32.gguf")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert sum(t.startswith("Stage ") for t in titles) == len(stages.STAGES)
        assert "Glossary" in titles and "Help" in titles
        await press_stage(pilot, "sampling")
        await pilot.pause()
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert {"Step", "Play", "Restart", "Temperature up", "New seed"} <= set(commands)
        await commands["Temperature up"].callback()
        assert app.state.settings.temperature > 0


def test_missing_model_is_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope.gguf"
    assert cli.main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.gguf" in err


def test_malformed_messages_file_is_one_line_and_exit_2(tmp_path, capsys, fixtures_dir):
    bad = tmp_path / "m.json"
    bad.write_text('[{"role": "user"}]')
    model = fixtures_dir / "reference" / "ref-qwen2-f32.gguf"
    assert cli.main([str(model), "--messages", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "content" in err


def test_unknown_hardware_is_one_line_and_exit_2(capsys, fixtures_dir):
    from walkthrough.costs.hardware import load_profiles

    model = fixtures_dir / "reference" / "ref-qwen2-f32.gguf"
    assert cli.main([str(model), "--hardware", "no-such-machine"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-machine" in err
    assert next(iter(load_profiles())) in err  # the known profiles are listed

"""Keys that throw work away ask first, only when something would be lost (issue 25, as a new user).

`d` deletes a message, `u` unloads the model (dropping the run), `t` switches
the chat template, a saved edit rebuilds the prompt, and on Speculate `d`, `+`,
`-` and `r` start the speculative run again: each asks "...? y / n" exactly as
`r` and `c` do (`screens/confirm.py`), `n` keeps everything. The message
editor accepts only a role the chat template knows. A prompt that does not fit
the model's context is a message on the Chat stage, not a run. Pilot tests at
80x24, reading widget content.
"""

from __future__ import annotations

from app_support import app_for, copy_gguf, settle, stage_key, widget_text
from conftest import FIXTURES_DIR
from textual.widgets import Input, Label, OptionList

from walkthrough.inspect.template_roles import COMMON_ROLES, known_roles
from walkthrough.screens.confirm import ConfirmDiscard
from walkthrough.screens.editor import MessageEditor

MODEL = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"  # context_length 256
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What does the record say about warfarin?"},
]
SIZE = (80, 24)
CHAT, DECODE, SPECULATE = (
    stage_key(stage) for stage in ("template", "decode", "speculate")
)


def _question(app) -> str:
    assert isinstance(app.screen, ConfirmDiscard), type(app.screen).__name__
    return widget_text(app.screen.query_one("#confirm-question")).strip()


async def _answer(pilot, passes: int = 40) -> None:
    """Run the request to its end on the Decode stage (at most `passes` passes)."""
    await pilot.press(DECODE)
    for _ in range(passes):
        if pilot.app.state.finished:
            break
        await pilot.press("space")
        await settle(pilot)
    assert pilot.app.state.finished


async def _highlight(pilot, index: int) -> None:
    await pilot.press(CHAT)
    await pilot.pause()
    pilot.app.screen.query_one("#message-list", OptionList).highlighted = index
    await pilot.pause()


async def test_d_asks_before_deleting_a_message_and_n_keeps_it():
    app = app_for(MODEL, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _highlight(pilot, 0)
        await pilot.press("d")
        await pilot.pause()
        assert _question(app) == "Delete message 1 (system, 14 characters)?  y / n"
        await pilot.press("n")
        await settle(pilot)
        assert app.state.messages == MESSAGES
        await pilot.press("d", "y")
        await settle(pilot)
        assert app.state.messages == MESSAGES[1:]


async def test_u_asks_before_dropping_a_finished_run_and_only_then():
    app = app_for(MODEL, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(CHAT, "u")  # nothing run yet: u acts at once
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDiscard) and app.state.unloads == 1
        await _answer(pilot)
        kept = app.state.steps
        await pilot.press(CHAT, "u")
        await pilot.pause()
        assert _question(app).startswith(
            f"Discard this run: {len(app.state.answer_ids())} tokens generated?"
        )
        await pilot.press("escape")
        await settle(pilot)
        assert app.state.steps == kept and app.state.unloads == 1
        await pilot.press("u", "y")
        await settle(pilot)
        assert app.state.unloads == 2 and app.state.steps == ()


async def test_a_saved_edit_asks_before_it_replaces_the_run_and_no_keeps_the_text():
    app = app_for(MODEL, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _answer(pilot)
        kept = app.state.steps
        await _highlight(pilot, 0)
        await pilot.press("e", "end", *" Be brief.", "ctrl+s")
        await pilot.pause()
        assert _question(app).startswith("Discard this run:")
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)  # back in the editor, the text as typed
        assert app.screen.query_one("#editor-content").text == "You are terse. Be brief."
        assert app.state.steps == kept and app.state.messages == MESSAGES
        await pilot.press("ctrl+s", "y")
        await settle(pilot)
        assert (
            app.state.messages[0]["content"] == "You are terse. Be brief."
            and app.state.steps != kept
        )


async def test_speculate_keys_ask_before_dropping_the_rounds():
    # with a --draft model, d has another drafter to pick (without one, the file's only drafter stays)
    app = app_for(MODEL, MESSAGES, max_tokens=5, draft=MODEL)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(SPECULATE)
        await settle(pilot)
        k = app.state.speculation.k
        await pilot.press("plus")  # nothing run yet: k changes at once
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDiscard) and app.state.speculation.k == k + 1
        for _ in range(3):
            await pilot.press("space")
            await settle(pilot)
        run = app.state.speculation
        written, rounds = len(run.answer()), len(run.rounds)
        assert rounds >= 1
        for key in ("d", "plus", "minus", "r"):
            await pilot.press(key)
            await pilot.pause()
            assert _question(app) == (
                f"Discard this speculative run: {written} tokens written "
                f"({rounds} round{'s' * (rounds != 1)})?  y / n"
            )
            await pilot.press("n")
            await settle(pilot)
            assert app.state.speculation is run
        await pilot.press("plus", "y")
        await settle(pilot)
        assert app.state.speculation.k == run.k + 1 and app.state.speculation.rounds == ()


async def test_t_and_plain_text_ask_before_they_replace_the_run(tmp_path):
    source = MODEL
    named = copy_gguf(
        source,
        tmp_path / "two-templates.gguf",
        {"tokenizer.chat_template.tool_use": "{% for m in messages %}{{ m.content }}{% endfor %}"},
    )
    app = app_for(named, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _answer(pilot)
        kept, template = app.state.steps, app.state.current_template
        for key in ("t", "r"):
            await pilot.press(CHAT, key)
            await pilot.pause()
            assert _question(app).startswith("Discard this run:")
            await pilot.press("n")
            await settle(pilot)
            assert app.state.steps == kept and app.state.current_template == template
        await pilot.press("t", "y")
        await settle(pilot)
        assert app.state.current_template != template and app.state.steps != kept


async def test_the_editor_accepts_only_roles_the_template_knows():
    app = app_for(MODEL, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(
            CHAT,
            "a",
            *"some text",
            "shift+tab",
            "end",
            *["backspace"] * 4,
            *"Please answer in French",
            "ctrl+s",
        )
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)
        error = str(app.screen.query_one("#editor-error", Label).content)
        assert error == (
            "role 'Please answer in French' is not one the chat template knows; "
            "use system, user, assistant, tool"
        )
        assert app.state.messages == MESSAGES
        role = app.screen.query_one("#editor-role", Input)
        role.value = "assistant"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.state.messages == [*MESSAGES, {"role": "assistant", "content": "some text"}]


def test_the_roles_a_template_names():
    templates = FIXTURES_DIR / "templates"
    llama = (templates / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text(encoding="utf-8")
    gpt_oss = (templates / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    assert known_roles(llama) == (*COMMON_ROLES, "ipython")
    assert known_roles(gpt_oss) == (*COMMON_ROLES, "developer")
    assert known_roles(
        "{% if m['role'] in ['critic', 'x' * 3] %}{% endif %}{% if role == 'judge' %}{% endif %}"
    ) == (*COMMON_ROLES, "critic", "judge")
    assert known_roles("{% if m.role == 'x' %}") == COMMON_ROLES  # does not parse: the common four
    assert known_roles(None) == COMMON_ROLES


async def test_a_prompt_longer_than_the_context_is_a_message_on_the_chat_stage_not_a_run():
    app = app_for(MODEL, [{"role": "user", "content": "warfarin " * 300}])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(CHAT)
        await pilot.pause()
        shown = widget_text(app.screen.query_one("#reuse-line"))
        n = len(app.state.prompt_ids)
        assert n > 256
        assert shown.startswith(
            f"Cannot run the request: the prompt has {n:,} tokens, more than the model's "
            "context of 256 (context_length); shorten the messages"
        )
        await pilot.press(DECODE, "space", "enter")
        await settle(pilot)
        assert app.state.steps == () and not app.state.can_run


async def test_r_over_the_four_calls_asks_once_calls_were_played():
    from test_app_four_calls import _app, _played

    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await _played(pilot)
        calls = app.state.calls
        assert len(calls.turns) == 4 and calls.summary is not None
        await pilot.press("r")
        await pilot.pause()
        assert _question(app) == "Discard these four calls: 4 calls played?  y / n"
        await pilot.press("n")
        await settle(pilot)
        assert app.state.calls is calls and app.screen is screen
        await pilot.press("r", "y")
        await settle(pilot)
        assert app.state.calls.play == calls.play + 1


async def test_four_calls_grown_past_the_context_stop_with_one_line():
    # the first request (about 234 tokens) fits the 256-token context with its 5-token answer; the
    # follow-up, which carries that answer and a new message, does not
    grown = [{"role": "system", "content": "You are terse. " + "warfarin " * 22}, MESSAGES[1]]
    app = app_for(MODEL, grown, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(CHAT, "c")
        await settle(pilot)
        calls = app.state.calls
        assert [turn.label for turn in calls.turns] == ["request"]
        assert calls.status.startswith("stopped: the prompt has ")
        assert "more than the model's context of 256 (context_length)" in calls.status


async def test_escape_in_the_editor_asks_before_it_drops_typed_text_and_no_keeps_it():
    app = app_for(MODEL, MESSAGES, max_tokens=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _highlight(pilot, 1)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)
        await pilot.press("escape")  # nothing typed: escape closes at once
        await pilot.pause()
        assert not isinstance(app.screen, (MessageEditor, ConfirmDiscard))
        await pilot.press("e", "end", *" and heparin")
        await pilot.pause()
        typed = app.screen.query_one("#editor-content").text
        assert typed.endswith(" and heparin")
        await pilot.press("escape")
        await pilot.pause()
        assert _question(app).startswith(f"Discard your edit: {len(typed):,} characters in the message?")
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)
        assert app.screen.query_one("#editor-content").text == typed
        await pilot.press("escape", "y")
        await settle(pilot)
        assert not isinstance(app.screen, (MessageEditor, ConfirmDiscard))
        assert app.state.messages == MESSAGES

"""Pilot tests of the Chat and Tokens stages: editing messages changes the tokens; message text is never special."""

from __future__ import annotations

from app_support import app_for, press_stage, settle, shown_text, widget_text

from walkthrough.inspect.chat import chat_tokens
from walkthrough.screens.editor import MessageEditor

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "hello <|im_end|> there"},
]


def _expected_ids(app, messages) -> list[int]:
    state = app.state
    return chat_tokens(state.tokenizer, state.template_source, messages).ids


async def test_editing_a_message_changes_the_tokens(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        before = list(app.state.prompt_ids)
        assert before == _expected_ids(app, MESSAGES)
        await press_stage(pilot, "template", "e")
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)
        await pilot.press("end", *" Be brief.", "ctrl+s")
        await settle(pilot)
        edited = [{"role": "system", "content": "You are terse. Be brief."}, MESSAGES[1]]
        assert app.state.messages == edited
        assert app.state.prompt_ids == _expected_ids(app, edited) != before
        assert app.state.steps == ()  # the request restarted
        assert "1. system: You are terse. Be brief." in shown_text(app)


async def test_add_and_delete_a_message(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "template", "a", *"more please", "ctrl+s")
        await settle(pilot)
        assert app.state.messages[-1] == {"role": "user", "content": "more please"}
        assert app.state.prompt_ids == _expected_ids(app, app.state.messages)
        await pilot.press("home", "d", "y")  # y: delete it (d asks first, tests/test_app_lose_work.py)
        await settle(pilot)
        assert app.state.messages == [MESSAGES[1], {"role": "user", "content": "more please"}]


async def test_escape_leaves_the_messages_alone(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "template", "e", *"xyz", "escape", "y")  # y: discard the edit (it asks)
        await settle(pilot)
        assert app.state.messages == MESSAGES


async def test_tokens_stage_counts_and_cursor(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        chat = app.state.chat
        await press_stage(pilot, "tokens")
        await pilot.pause()
        text = shown_text(app)
        row = next(line for line in text.splitlines() if "whole prompt" in line).split()
        assert row[2:5] == [str(len(chat.text)), str(len(chat.text.encode("utf-8"))), str(len(chat.tokens))]
        user = MESSAGES[1]["content"]  # the template writes it as is
        row = next(line for line in text.splitlines() if "2. user" in line).split()
        n_user = sum(1 for t in chat.tokens if t.message == 1)
        assert row[2:6] == [str(len(user)), str(len(user.encode("utf-8"))), str(n_user), f"{len(user) / n_user:.2f}"]
        assert f"token 1/{len(chat.tokens)}  id {chat.tokens[0].id}" in text
        await pilot.press("right", "right")
        await pilot.pause()
        third = chat.tokens[2]
        expected_bytes = app.state.tokenizer.token_bytes(third.id).hex(" ")
        assert f"token 3/{len(chat.tokens)}  id {third.id}" in shown_text(app)
        assert expected_bytes in shown_text(app)


async def test_special_looking_message_text_stays_ordinary(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        chat = app.state.chat
        from_user = [t for t in chat.tokens if t.message == 1]
        assert from_user and not any(t.special for t in from_user)
        assert any(t.special for t in chat.tokens if t.message is None)
        await press_stage(pilot, "tokens", "home")
        await pilot.pause()
        selected = app.screen.query_one("#token-selected")
        assert chat.tokens[0].special and " special " in widget_text(selected)  # the template's marker
        looks_special = next(i for i, t in enumerate(chat.tokens) if t.message == 1 and "|" in t.piece)
        await pilot.press(*["right"] * looks_special)
        await pilot.pause()
        assert " ordinary " in widget_text(selected) and "message 2" in widget_text(selected)


async def test_t_switches_to_a_named_chat_template(fixtures_dir, tmp_path):
    from app_support import copy_gguf

    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.template import chat_templates

    named = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    path = copy_gguf(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", tmp_path / "named.gguf",
                     {"tokenizer.chat_template.plain": named})
    with open_gguf(path) as f:
        templates = chat_templates(f)
    assert list(templates) == ["default", "plain"]
    app = app_for(path, MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        default_ids = list(app.state.prompt_ids)
        assert default_ids == chat_tokens(app.state.tokenizer, templates["default"], MESSAGES).ids
        await press_stage(pilot, "template", "v")
        await pilot.pause()
        assert "template default  (1 of 2: default, plain; t switches, r: plain text)" in shown_text(app)
        await pilot.press("t")
        await settle(pilot)
        assert app.state.template_name == "plain" and app.state.template_source == named
        assert app.state.prompt_ids == chat_tokens(app.state.tokenizer, named, MESSAGES).ids != default_ids
        assert app.state.steps == ()  # the request restarted with the new prompt
        assert "template plain  (2 of 2" in shown_text(app)
        await pilot.press("t")
        await settle(pilot)
        assert app.state.template_name == "default" and app.state.prompt_ids == default_ids


async def test_template_option_renders_with_the_given_file(fixtures_dir):
    source = fixtures_dir / "templates" / "Qwen-Qwen3-0.6B.jinja"
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES, template=source)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        assert state.template_source == source.read_text(encoding="utf-8")
        assert state.template_names == (source.name,)
        assert state.prompt_ids == _expected_ids(app, MESSAGES)
        await press_stage(pilot, "template", "t")  # no other template to switch to
        await pilot.pause()
        assert state.template_source == source.read_text(encoding="utf-8")

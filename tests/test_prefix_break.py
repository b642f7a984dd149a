"""Why a shared prefix breaks, on real chat templates and a real tokenizer (Qwen3.5's vocabulary).

Each case builds what a session would hold (a rendered request, then the tokens of an answer) and the
next request a client would send, and checks the first differing token and its cause.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from conftest import fixture_tokenizer

from walkthrough.engine.checkpoints import common_prefix
from walkthrough.engine.prefix_break import Held, explain
from walkthrough.inspect.chat import chat_tokens
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.inspect.template import select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

JAN15 = datetime(2026, 1, 15, tzinfo=timezone.utc)
JAN16 = datetime(2026, 1, 16, tzinfo=timezone.utc)
THOUGHT = "<think>\nThe user greets me.\n</think>\n\nHello there."


@pytest.fixture(scope="module")
def tok(fixtures_dir) -> GGUFTokenizer:
    return fixture_tokenizer(fixtures_dir / "vocab" / "ggml-vocab-qwen35.gguf")


def _template(fixtures_dir, name: str) -> str:
    return (fixtures_dir / "templates" / f"{name}.jinja").read_text(encoding="utf-8")


def _break(tok, source, held_messages, answer_ids, new_messages, *, now=None, now_again=None, prompt=True):
    def render(messages, when=None, generation=True):
        extra = {} if when is None else {"now": when}
        return chat_tokens(tok, source, messages, add_generation_prompt=generation, **extra)

    held = Held(held_messages, render(held_messages, now, prompt), answer_ids)
    chat = render(new_messages, now_again or now)
    position = common_prefix(held.ids, chat.ids)
    found = explain(held, new_messages, chat, position, decode=tok.decode,
                    render_again=lambda m: render(m, now_again or now, prompt))
    return held, chat, found


def test_qwen3_drops_the_reasoning_of_an_earlier_answer(tok, fixtures_dir):
    source = _template(fixtures_dir, "Qwen-Qwen3-0.6B")
    first = [{"role": "user", "content": "Hi"}]
    answer = [t.id for t in tok.tokenize(THOUGHT, parse_special=True)]  # generated after "<|im_start|>assistant\n"
    follow = [*first, {"role": "assistant", "content": THOUGHT}, {"role": "user", "content": "Bye"}]
    held, _chat, found = _break(tok, source, first, answer, follow)
    assert found.position == len(held.chat.ids)  # the answer's first token
    assert (found.cause, found.held_origin, found.new_origin) == ("answer", "the model's answer", "message 2 (assistant)")
    assert "reasoning dropped" in found.words
    assert "<think>".startswith(tok.decode([found.held_id])) and tok.decode([found.new_id]) == "Hello"


def test_deepseek_r1_opens_a_think_block_only_in_the_generation_prompt(tok, fixtures_dir):
    source = _template(fixtures_dir, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    first = [{"role": "user", "content": "Hi"}]
    generated = "The user greets me.\n</think>\n\nHello there."  # the prompt already opened <think>
    answer = [t.id for t in tok.tokenize(generated, parse_special=False)]
    follow = [*first, {"role": "assistant", "content": generated}, {"role": "user", "content": "Bye"}]
    held, _chat, found = _break(tok, source, first, answer, follow)
    assert found.position < len(held.chat.ids)
    assert (found.cause, found.held_origin) == ("prompt_end", "template text")
    assert "<think>" in held.chat.text[held.chat.tokens[found.position].start :]  # what the new render lacks


def test_gpt_oss_prints_todays_date(tok, fixtures_dir):
    source = _template(fixtures_dir, "openai-gpt-oss-120b")
    first = [{"role": "user", "content": "Hi"}]
    _, _, found = _break(tok, source, first, [], first + [], now=JAN15, now_again=JAN16)
    assert (found.cause, found.held_origin, found.new_origin) == ("date", "template text", "template text")
    assert tok.decode([found.held_id]) != tok.decode([found.new_id])


def test_qwen3_rerenders_an_earlier_turn_once_a_user_message_follows(tok, fixtures_dir):
    # The held request ended with the assistant's message (a continued answer): Qwen3 keeps its reasoning
    # there; once a user message follows, the same message is rendered without it.
    source = _template(fixtures_dir, "Qwen-Qwen3-0.6B")
    first = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": THOUGHT}]
    follow = [*first, {"role": "user", "content": "Bye"}]
    _, _, found = _break(tok, source, first, [], follow, prompt=False)
    assert found.cause == "rerendered"
    assert found.held_origin.startswith("message 2") or found.held_origin == "template text"


def test_an_edited_message_is_named(tok, fixtures_dir):
    source = _template(fixtures_dir, "Qwen-Qwen3-0.6B")
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is warfarin safe?"}]
    edited = [first[0], {"role": "user", "content": "Is aspirin safe?"}]
    _, _, found = _break(tok, source, first, [], edited)
    assert (found.cause, found.words) == ("edited", "message 2 (user) was changed")
    assert found.new_origin == "message 2 (user)"


def test_the_same_text_in_other_tokens(tok):
    # The model wrote "Hello" one character at a time; the bundled model's ChatML template writes the same text
    # and the tokenizer cuts it as one token.
    with open_gguf(BUNDLED_MODEL) as f:
        source = select_template(f)
    first = [{"role": "user", "content": "Hi"}]
    answer = [tok.tokenize(c, parse_special=False)[0].id for c in "Hello"]
    assert tok.decode(answer) == "Hello" and len(tok.tokenize("Hello", parse_special=False)) == 1
    follow = [*first, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    held, _chat, found = _break(tok, source, first, answer, follow)
    assert (found.position, found.cause) == (len(held.chat.ids), "retokenized")
    assert (tok.decode([found.held_id]), tok.decode([found.new_id])) == ("H", "Hello")

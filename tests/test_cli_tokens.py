"""`walkthrough template` and `walkthrough tokenize` through the CLI entry point."""

from __future__ import annotations

import calendar
import json
from datetime import date

import pytest
from conftest import FIXTURES_DIR

from walkthrough.cli import main
from walkthrough.inspect.chat import chat_tokens
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import render, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

REF = (
    FIXTURES_DIR / "reference" / "ref-qwen2-f32.gguf"
)  # tiny byte-level vocabulary with ChatML specials
QWEN35 = FIXTURES_DIR / "vocab" / "ggml-vocab-qwen35.gguf"


def _fixture_cases():
    for path in sorted((FIXTURES_DIR / "templates").glob("*.expected.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for name, case in doc["cases"].items():
            yield pytest.param(doc, case, id=f"{doc['template']}:{name}")


@pytest.fixture(scope="module")
def ref_tokenizer():
    with open_gguf(REF) as f:
        return GGUFTokenizer.from_gguf(f), select_template(f)


def _messages_file(tmp_path, messages) -> str:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return str(path)


def _one_error_line(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("walkthrough: error: ") and err.endswith("\n") and err.count("\n") == 1
    return err


# ---- template ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("doc", "case"), list(_fixture_cases()))
def test_template_prints_the_reference_text_exactly(tmp_path, capsys, monkeypatch, doc, case):
    monkeypatch.setenv(
        "SOURCE_DATE_EPOCH", str(calendar.timegm(date.fromisoformat(doc["date"]).timetuple()))
    )
    argv = [
        "template",
        "--template",
        str(FIXTURES_DIR / "templates" / doc["template"]),
        "--messages",
        _messages_file(tmp_path, case["messages"]),
        "--bos-token",
        doc["bos_token"],
        "--eos-token",
        doc["eos_token"],
    ]
    if not case["add_generation_prompt"]:
        argv.append("--no-generation-prompt")
    code = main(argv)
    if "error" in case:
        assert case["message"] in _one_error_line(capsys, code)
    else:
        assert code == 0
        assert capsys.readouterr().out == case["text"]


def test_template_of_a_model_uses_its_vocabulary(tmp_path, capsys, ref_tokenizer):
    tokenizer, source = ref_tokenizer
    messages = [{"role": "user", "content": "hi"}]
    assert (
        main(
            [
                "template",
                str(REF),
                "--messages",
                _messages_file(tmp_path, messages),
                "--no-generation-prompt",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == render(source, messages, add_generation_prompt=False)
    bos = "{{ bos_token }}|{{ eos_token }}"
    (tmp_path / "t.jinja").write_text(bos, encoding="utf-8")
    assert (
        main(
            [
                "template",
                str(REF),
                "--template",
                str(tmp_path / "t.jinja"),
                "--messages",
                _messages_file(tmp_path, messages),
            ]
        )
        == 0
    )
    expected = "|".join(
        tokenizer.token_bytes(i).decode() for i in (tokenizer.bos_id, tokenizer.eos_id)
    )
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--template-name", "tool_use"], "has no chat template named 'tool_use'; it has: default"),
        (["--template", "x.jinja", "--template-name", "rag"], "give one of them"),
        (["--template", "/nonexistent/x.jinja"], "cannot read the template"),
    ],
)
def test_template_option_errors(tmp_path, capsys, argv, expected):
    code = main(
        [
            "template",
            str(REF),
            "--messages",
            _messages_file(tmp_path, [{"role": "user", "content": "a"}]),
            *argv,
        ]
    )
    assert expected in _one_error_line(capsys, code)


def test_malformed_messages_are_one_line(tmp_path, capsys):
    path = tmp_path / "messages.json"
    path.write_text('[{"role": "user", "content": "a"}, {"role": "assistant"}]', encoding="utf-8")
    code = main(["template", str(REF), "--messages", str(path)])
    assert f"{path}: item 2 has no 'content'" in _one_error_line(capsys, code)


def test_hostile_template_is_one_line(tmp_path, capsys):
    (tmp_path / "evil.jinja").write_text("{{ cycler.__init__.__globals__.os }}", encoding="utf-8")
    code = main(
        [
            "template",
            "--template",
            str(tmp_path / "evil.jinja"),
            "--messages",
            _messages_file(tmp_path, [{"role": "user", "content": "a"}]),
        ]
    )
    assert "template tried to access '__init__'" in _one_error_line(capsys, code)


# ---- tokenize --json --------------------------------------------------------------------------------------------
def test_tokenize_json_matches_the_library(tmp_path, capsys, ref_tokenizer):
    tokenizer, source = ref_tokenizer
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi <|im_end|> é"},
    ]
    assert (
        main(["tokenize", str(REF), "--messages", _messages_file(tmp_path, messages), "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    expected = chat_tokens(tokenizer, source, messages)
    assert out["ids"] == expected.ids
    assert out["pieces"] == [tokenizer.piece(i) for i in expected.ids]
    assert out["special"] == [t.special for t in expected.tokens]
    assert out["message"] == [t.message for t in expected.tokens]
    assert out["text"] == expected.text
    assert (out["characters"], out["bytes"], out["tokens"]) == (
        len(expected.text),
        len(expected.text.encode()),
        len(expected.ids),
    )
    im_end = tokenizer.encode("<|im_end|>", parse_special=True)[0]
    assert out["ids"].count(im_end) == 2  # the two turns' ends; the user's copy stays plain text


def test_tokenize_text_is_one_user_message(capsys, ref_tokenizer):
    tokenizer, source = ref_tokenizer
    assert main(["tokenize", str(REF), "--text", "hello", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ids"] == chat_tokens(tokenizer, source, [{"role": "user", "content": "hello"}]).ids


def test_tokenize_raw_is_plain(capsys, tmp_path, ref_tokenizer):
    tokenizer, _ = ref_tokenizer
    text = "<|im_start|>user\nhi<|im_end|>\n"
    assert main(["tokenize", str(REF), "--text", text, "--raw", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ids"] == tokenizer.encode(text, parse_special=False)
    assert not any(out["special"]) and "message" not in out
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    assert main(["tokenize", str(REF), "--text-file", str(path), "--raw", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ids"] == out["ids"]


def test_injection_through_the_cli(tmp_path, capsys):
    doc = json.loads(
        (FIXTURES_DIR / "templates" / "Qwen3.5-4B.expected.json").read_text(encoding="utf-8")
    )
    case = doc["cases"]["injection"]
    code = main(
        [
            "tokenize",
            str(QWEN35),
            "--template",
            str(FIXTURES_DIR / "templates" / doc["template"]),
            "--messages",
            _messages_file(tmp_path, case["messages"]),
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert case["messages"][0]["content"] in out["text"]
    assert not any(s for s, m in zip(out["special"], out["message"]) if m is not None)


# ---- tokenize --batch ----------------------------------------------------------------------------------------------
def test_batch_gives_one_result_per_line(tmp_path, capsys, ref_tokenizer):
    tokenizer, _ = ref_tokenizer
    texts = ["first line", "a <|im_end|> b", "naïve ✓", ""]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    assert main(["tokenize", str(REF), "--batch", str(path), "--raw"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(texts)
    for text, line in zip(texts, lines):
        out = json.loads(line)
        assert out["ids"] == tokenizer.encode(text, parse_special=False)
        assert (out["characters"], out["bytes"], out["tokens"]) == (
            len(text),
            len(text.encode()),
            len(out["ids"]),
        )
    assert main(["tokenize", str(REF), "--batch", str(path)]) == 0  # through the template
    chat_lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(chat_lines) == len(texts) and all("message" in x for x in chat_lines)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('"ok"\n42\n', "line 2: expected a JSON string, found a number"),
        ('"ok"\n{nope\n', "line 2: not valid JSON"),
    ],
)
def test_bad_batch_line_is_named(tmp_path, capsys, content, expected):
    path = tmp_path / "in.jsonl"
    path.write_text(content, encoding="utf-8")
    code = main(["tokenize", str(REF), "--batch", str(path)])
    assert f"{path} {expected}" in _one_error_line(capsys, code)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--messages", "MESSAGES", "--raw"], "--raw tokenizes plain text"),
        (["--text", "a", "--raw", "--template", "x.jinja"], "--raw uses no template"),
        (["--text-file", "/nonexistent/in.txt"], "cannot read the text"),
    ],
)
def test_tokenize_option_errors(tmp_path, capsys, argv, expected):
    messages = _messages_file(tmp_path, [{"role": "user", "content": "a"}])
    code = main(["tokenize", str(REF), *[messages if a == "MESSAGES" else a for a in argv]])
    assert expected in _one_error_line(capsys, code)


def test_model_without_a_template_is_one_line(tmp_path, capsys):
    from gguf.constants import GGUFValueType as V
    from gguf_builder import write_gguf  # a vocabulary-only file with no chat template

    with open_gguf(REF) as f:
        tokens = f.get("tokenizer.ggml.tokens")
        merges = f.get("tokenizer.ggml.merges")
        types = f.get("tokenizer.ggml.token_type").tolist()
    path = write_gguf(
        tmp_path / "bare.gguf",
        {
            "tokenizer.ggml.model": (V.STRING, "gpt2"),
            "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, tokens),
            "tokenizer.ggml.token_type": (V.ARRAY, V.INT32, types),
            "tokenizer.ggml.merges": (V.ARRAY, V.STRING, merges),
        },
    )
    code = main(["tokenize", str(path), "--text", "hi"])
    assert "bare.gguf has no chat template" in _one_error_line(capsys, code)
    assert main(["tokenize", str(path), "--text", "hi", "--raw", "--json"]) == 0


# ---- human output ---------------------------------------------------------------------------------------------------
def test_human_output_marks_specials_and_shows_text_literally(tmp_path, capsys):
    messages = [{"role": "user", "content": "Hi [bold]x[/bold]\tthere \x1b[31m"}]
    assert main(["tokenize", str(REF), "--messages", _messages_file(tmp_path, messages)]) == 0
    out = capsys.readouterr().out
    assert "⟦<|im_start|>⟧" in out and "⟦<|im_end|>⟧" in out
    assert "[bold]x[/bold]" in out  # no markup interpreted
    assert "\x1b" not in out and "\\x1b" in out  # control characters visible, not sent
    assert "Hi␣" in out and "→" in out and "↵" in out  # whitespace visible
    assert "message 1 (user)" in out and "template" in out
    assert out.splitlines()[0].startswith(f"{len(chat_rows(out))} tokens")


def chat_rows(out: str) -> list[str]:
    """The token table's rows: lines that start with an index and an id."""
    rows = [line.split() for line in out.splitlines()]
    return [r for r in rows if len(r) >= 2 and r[0].isdigit() and r[1].isdigit()]

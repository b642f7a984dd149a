"""Text the vocabulary cannot encode: found, counted and named (tokenizer, chat, `tokenize` CLI, Tokens stage).

The lossy vocabulary is a reference model's byte-level vocabulary with the
tokens of the uppercase ASCII bytes and of every byte from 0x80 renamed, so
those bytes have no token and llama.cpp drops them. What is lost is checked
against llama.cpp itself: the text with the lost spans taken out is exactly what
llama.cpp's detokenize gives back for its own ids. The real fixtures' vocabularies
spell every test string, so there nothing may be reported lost.
"""

from __future__ import annotations

import json

import pytest
from app_support import SIZES, app_for, press_stage, settle, widget_text
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType as V
from llama_support import needs_llama

from walkthrough.cli import main
from walkthrough.inspect.chat import chat_tokens, raw_tokens
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer, gpt2_byte_chars

SOURCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"
MISSING_BYTES = [*range(ord("A"), ord("Z") + 1), *range(0x80, 0x100)]
TEXTS = ["Hello, Zoë! naïve café 🦙 ok", "all lower case, nothing lost", "ÀÉÎ", "x\nY\tz"]
SEPARATOR = "\n__ggml_vocab_test__\n"


@pytest.fixture(scope="module")
def lossy_path(tmp_path_factory):
    """The reference model with the tokens of `MISSING_BYTES` renamed (same count, so the weights still fit)."""
    from gguf_builder import rewrite_gguf

    with open_gguf(SOURCE) as f:
        tokens = list(f.get("tokenizer.ggml.tokens"))
    chars = gpt2_byte_chars()
    for b in MISSING_BYTES:
        i = tokens.index(chars[b])
        tokens[i] = f"<gone-{i}>"
    target = tmp_path_factory.mktemp("lossy") / "lossy.gguf"
    return rewrite_gguf(SOURCE, target, {"tokenizer.ggml.tokens": (V.ARRAY, V.STRING, tokens)})


@pytest.fixture(scope="module")
def lossy(lossy_path):
    with open_gguf(lossy_path) as f:
        return GGUFTokenizer.from_gguf(f), select_template(f)


def _unspellable(text: str) -> int:
    """Characters of `text` with a byte that has no token in the lossy vocabulary."""
    return sum(1 for c in text if any(b in MISSING_BYTES for b in c.encode()))


def _without(text: str, spans) -> str:
    keep, pos = [], 0
    for a, b in spans:
        keep.append(text[pos:a])
        pos = b
    return "".join(keep) + text[pos:]


@needs_llama
def test_what_is_lost_is_what_llama_cpp_drops(lossy_path, lossy):
    import llama_cpp

    tok, _ = lossy
    llm = llama_cpp.Llama(model_path=str(lossy_path), vocab_only=True, verbose=False)
    for text in TEXTS:
        tokens, lost = tok.tokenize_accounted(text)
        ref_ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        assert [t.id for t in tokens] == ref_ids  # ids unchanged: still llama.cpp's
        assert _without(text, lost).encode() == llm.detokenize(ref_ids)
        assert sum(b - a for a, b in lost) == _unspellable(text)


@pytest.mark.app  # slow: every string of every fixture vocabulary
def test_fixture_vocabularies_lose_nothing(fixtures_dir):
    for inp in sorted((fixtures_dir / "vocab").glob("*.gguf.inp")):
        with open_gguf(inp.with_suffix("")) as f:
            tok = GGUFTokenizer.from_gguf(f)
        for text in inp.read_text(encoding="utf-8").split(SEPARATOR):
            tokens, lost = tok.tokenize_accounted(text)
            assert lost == [], (inp.name, text)
            assert [t.id for t in tokens] == tok.encode(text)
            assert raw_tokens(tok, text).warnings == []


def test_chat_counts_lost_characters_per_message(lossy):
    tok, source = lossy
    messages = [{"role": "system", "content": "Be Brief."}, {"role": "user", "content": TEXTS[0]}]
    chat = chat_tokens(tok, source, messages)
    lost_text = [chat.text[a:b] for a, b in chat.lost]
    expected = _unspellable(chat.text)
    assert chat.counts().lost == sum(map(len, lost_text)) == expected
    assert chat.counts(0).lost == _unspellable(messages[0]["content"]) == 2
    assert chat.counts(1).lost == _unspellable(TEXTS[0])
    (line,) = [w for w in chat.warnings if "no token in this vocabulary" in w]
    assert line.startswith(f"{expected} of {len(chat.text)} characters")
    assert "'B'×2, 'H'×1" in line and "and 2 more kinds" in line  # 7 kinds, the commonest first
    assert line.endswith(f"first at character {chat.text.index('B') + 1}: 'B'")
    plain = chat_tokens(tok, source, [{"role": "user", "content": TEXTS[1]}])
    assert plain.lost == [] and plain.counts().lost == 0 and plain.warnings == []


def test_tokenize_cli_warns_and_reports_lost_spans(lossy_path, capsys):
    assert main(["tokenize", str(lossy_path), "--raw", "--text", TEXTS[0]]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    n = _unspellable(TEXTS[0])
    assert len(lines) == 1 and lines[0].startswith(f"walkthrough: warning: {n} of {len(TEXTS[0])} characters")
    assert "'ë'×1" in lines[0] and f"({n} lost" in out
    assert main(["tokenize", str(lossy_path), "--raw", "--json", "--text", "x\nY\tz"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["lost"] == [{"start": 2, "end": 3, "text": "Y"}]
    assert err == "" and "1 of 5 characters has no token" in doc["warnings"][0]
    assert main(["tokenize", str(SOURCE), "--json", "--text", TEXTS[0]]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["lost"] == [] and "warnings" not in doc


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_tokens_stage_warns_only_when_text_is_lost(lossy_path, size):
    messages = [{"role": "user", "content": TEXTS[0]}]
    for path, lossy_file in ((lossy_path, True), (SOURCE, False)):
        app = app_for(path, messages)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await press_stage(pilot, "tokens")
            await pilot.pause()
            warning = app.screen.query_one("#token-lost")
            counts = widget_text(app.screen.query_one("#token-counts"))
            assert warning.display is lossy_file
            if lossy_file:
                n = app.state.chat.counts().lost
                assert n > 0
                assert widget_text(warning).startswith(f"Text lost: {n} of ")
                assert "lost" in counts.splitlines()[0]
                assert warning.region.height > 0 and warning.region.y < size[1]  # on screen
            else:
                assert "lost" not in counts

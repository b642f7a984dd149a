"""BPE merge by merge: the file's merges replayed on a text end at the tokenizer's ids and llama.cpp's,
and a BPE trained on a paragraph learns its most frequent pairs first.

Expected ids come from the references: llama.cpp's own vocabulary tests (`vocab/*.gguf.out`, the
files with a merges list), our tokenizer on the same text (the Tokens stage's ids), and llama.cpp's
`tokenize` run here on SmolLM2 and on the tiny model. Pilot tests open the view from the Tokens stage.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
from app_support import SIZES, press_stage, reference_app, settle, shown_text
from conftest import fixture_tokenizer
from llama_support import needs_llama
from real_weights_support import find_smollm2
from test_tokenizer import _load_case

from walkthrough.cli import main
from walkthrough.inspect import bpe_train
from walkthrough.inspect.bpe_replay import ReplayError, replay
from walkthrough.inspect.bpe_steps import merge_steps
from walkthrough.inspect.chat import chat_tokens, raw_tokens
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import bundled_model
from walkthrough.inspect.template import load_messages, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

BPE_VOCABS = ("ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen35.gguf")
TEXT = "The patient presents with a fever and a dry cough for three days.\n\n  Dose: 12.5 mg, twice daily!"


def _tokenizer(path: Path) -> GGUFTokenizer:
    return fixture_tokenizer(path)


@pytest.mark.app  # slow: every BPE fixture vocabulary's tests, merge by merge
@pytest.mark.parametrize("name", BPE_VOCABS)
def test_replay_ends_at_llama_cpp_ids_on_its_vocabulary_tests(fixtures_dir, name: str) -> None:
    tok = _tokenizer(fixtures_dir / "vocab" / name)
    texts, expected = _load_case(fixtures_dir, name)
    assert len(texts) == len(expected) and len(texts) > 20
    stepped = 0
    for text, ids in zip(texts, expected):
        r = replay(tok, raw_tokens(tok, text))
        assert r.final_ids == ids, repr(text)
        stepped += len(r.steps)
    assert stepped > len(texts)  # merges were applied, not whole words looked up


def test_whole_words_start_whole_where_the_vocabulary_ignores_merges(fixtures_dir) -> None:
    tok = _tokenizer(fixtures_dir / "vocab" / "ggml-vocab-llama-bpe.gguf")
    r = replay(tok, raw_tokens(tok, "hello world"))
    assert [s.whole for s in r.segments] == [True, True] and r.steps == [] and r.agrees


def test_each_step_joins_one_rule_in_rank_order_within_a_word() -> None:
    ranks = {("l", "o"): 0, ("lo", "w"): 1, ("a", "b"): 5, ("b", "a"): 2}
    h = merge_steps([list("low"), list("lot"), list("abab")], ranks)
    # "abab": (b, a) ranks before (a, b), so the middle pair joins and (a, b) is never applied
    assert [(s.left, s.right, s.joins, s.words) for s in h.steps] == [
        ("l", "o", 2, 2), ("lo", "w", 1, 1), ("b", "a", 1, 1)]
    assert h.symbols_at(2, 0) == tuple("abab") and h.symbols_at(2, 3) == ("a", "ba", "b")
    assert h.symbols_at(0, 1) == ("lo", "w") and h.changed_at(0, 2) and not h.changed_at(1, 2)


def test_replay_of_the_tokens_stage_prompt_ends_at_its_ids() -> None:
    path = bundled_model()
    f = open_gguf(path)
    tok = GGUFTokenizer.from_gguf(f)
    messages = load_messages(Path(__file__).parents[1] / "assets" / "default_request.json")
    chat = chat_tokens(tok, select_template(f), messages)
    r = replay(tok, chat)
    assert r.agrees and r.final_ids == chat.ids
    assert len(r.pieces_at(0)) > len(r.pieces_at(len(r.steps))) == len(chat.ids)
    assert [p for p, special, _ in r.pieces_at(0) if special] == [t.piece for t in chat.tokens if t.special]


def _llama_ids(path: Path, text: str) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return llm.tokenize(text.encode(), add_bos=False, special=False)
    finally:
        llm.close()


@needs_llama
def test_replay_on_the_reference_models_vocabulary_is_llama_cpp_tokenize(fixtures_dir) -> None:
    path = fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf"  # a 268-token byte-level BPE, 9 merges
    tok = _tokenizer(path)
    text = "the patient presents with fever\n\n  and a dry cough"
    r = replay(tok, raw_tokens(tok, text))
    assert r.steps and r.final_ids == _llama_ids(path, text) == r.expected


@needs_llama
def test_replay_on_smollm2_and_the_tiny_model_is_llama_cpp_tokenize() -> None:
    paths = [bundled_model()] + ([find_smollm2()] if find_smollm2() else [])
    for path in paths:
        tok = _tokenizer(path)
        r = replay(tok, raw_tokens(tok, TEXT))
        assert r.final_ids == _llama_ids(path, TEXT) == r.expected, path.name
        assert len(r.steps) > 10
    if len(paths) == 1:
        pytest.skip("SmolLM2 not found (SMOLLM2_GGUF): checked on the tiny model only")


def test_sentencepiece_has_no_merges_to_replay(fixtures_dir) -> None:
    tok = _tokenizer(fixtures_dir / "vocab" / "ggml-vocab-llama-spm.gguf")
    with pytest.raises(ReplayError, match="no tokenizer.ggml.merges"):
        replay(tok, raw_tokens(tok, "hello"))


def test_training_learns_the_most_frequent_pair_first() -> None:
    text = bpe_train.paragraph()
    trained = bpe_train.train(text, 30)
    words = Counter(bpe_train.WORDS.findall(text))
    pairs: Counter = Counter()
    for w, n in words.items():
        b = bpe_train.byte_word(w)
        for pair in pairwise(b):
            pairs[pair] += n
    first = trained.merges[0]
    assert first.count == max(pairs.values()) == pairs[(first.left, first.right)]
    # a join only lowers the other pairs' counts, and a new pair is seen at most as often as its parts
    assert [m.count for m in trained.merges] == sorted((m.count for m in trained.merges), reverse=True)
    assert all(m.count >= 2 for m in trained.merges) and trained.vocabulary == trained.base_symbols + 30
    pieces, _ = bpe_train.cut(trained, "the fever")
    assert "".join(pieces) == "the fever" and len(pieces) < len("the fever")


def test_cli_merges_prints_the_steps_and_agrees(capsys) -> None:
    assert main(["tokenize", "--text", TEXT, "--raw", "--merges", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    tok = _tokenizer(bundled_model())
    assert doc["agrees"] and doc["final_ids"] == doc["tokenizer_ids"] == tok.encode(TEXT)
    assert doc["start_pieces"] == len(TEXT.encode()) and len(doc["steps"]) > 10
    assert main(["tokenize", "--text", "a fever", "--merges", "--learn-merges", "20"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines wrapped at the console's width
    assert "The ids are the tokenizer's, one for one." in out and "A BPE trained on one paragraph" in out


def test_cli_merges_refuses_batch_and_bad_counts(tmp_path, capsys) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text('"x"\n')
    assert main(["tokenize", "--batch", str(batch), "--merges"]) == 2
    assert main(["tokenize", "--text", "x", "--learn-merges", "0"]) == 2
    assert "--learn-merges 0" in capsys.readouterr().err


@pytest.mark.app
@pytest.mark.parametrize("size", ["small", "large"])
async def test_merges_view_steps_from_the_tokens_stage(size: str) -> None:
    app = reference_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        await settle(pilot)
        await press_stage(pilot, "tokens", "m")
        await settle(pilot)
        screen = app.screen
        r = screen.replay
        assert r is not None and r.agrees
        assert "start: every word as single characters" in shown_text(app)
        await pilot.press("right")
        first = r.steps[0]
        assert f"merge 1 of {len(r.steps)}" in shown_text(app)
        assert f"rank {first.rank:,} in the file's merges" in shown_text(app)
        await pilot.press("end")
        text = shown_text(app)
        assert f"{len(app.state.chat.ids):,} tokens at the end" in text
        assert "The ids are the tokenizer's, one for one." in text
        await pilot.press("left")
        assert f"merge {len(r.steps) - 1} of {len(r.steps)}" in shown_text(app)
        await pilot.press("home", "pagedown")
        assert f"merge {min(10, len(r.steps))} of {len(r.steps)}" in shown_text(app)
        await pilot.press("t")
        assert "A BPE trained on one paragraph" in shown_text(app)
        await pilot.press("escape")
        assert app.screen.__class__.__name__ == "TokensScreen"


@pytest.mark.app
async def test_merges_view_home_and_end_jump_when_the_prompt_overflows_the_box() -> None:
    # A prompt longer than the box: the scrolling box took home / end for itself (they scrolled)
    words = " ".join(f"patient {n} takes warfarin daily" for n in range(60))
    app = reference_app([{"role": "user", "content": words}])
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        await press_stage(pilot, "tokens", "m")
        await settle(pilot)
        r = app.screen.replay
        assert r is not None and app.screen.query_one("#help-box").max_scroll_y > 0
        await pilot.press("right", "end")
        assert f"merge {len(r.steps)} of {len(r.steps)}" in shown_text(app)
        await pilot.press("home")
        assert "start: every word as single characters" in shown_text(app)
        await pilot.press("end")
        assert f"merge {len(r.steps)} of {len(r.steps)}" in shown_text(app)

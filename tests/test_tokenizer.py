"""The GGUF tokenizer against llama.cpp's own vocabulary tests, special-token parsing, and bad vocabularies.

Expected ids come from the fixtures (`../shared/fixtures/vocab/*.gguf.out`, written
by llama.cpp with add_special=false, parse_special=false); everything else is
computed in the test from the file's own token list.
"""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES_DIR, fixture_tokenizer
from gguf.constants import GGUFValueType as V
from gguf.constants import TokenType

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.tokenizer import GGUFTokenizer, TokenizerError
from walkthrough.inspect.vocab import VocabError

SEPARATOR = "\n__ggml_vocab_test__\n"


def _vocab_cases() -> list[tuple[str, int]]:
    """(vocab file name, string index) for every test string; a failing placeholder when absent."""
    cases = []
    for inp in sorted((FIXTURES_DIR / "vocab").glob("*.gguf.inp")):
        n = len(inp.read_text(encoding="utf-8").split(SEPARATOR))
        cases += [(inp.name.removesuffix(".inp"), i) for i in range(n)]
    return cases or [("missing", 0)]


def _load_case(fixtures_dir, name: str) -> tuple[list[str], list[list[int]]]:
    base = fixtures_dir / "vocab" / name
    texts = base.with_name(name + ".inp").read_text(encoding="utf-8").split(SEPARATOR)
    lines = base.with_name(name + ".out").read_text(encoding="utf-8").split("\n")
    return texts, [[int(x) for x in line.split()] for line in lines]


_TOKENIZERS: dict[str, GGUFTokenizer] = {}


@pytest.fixture
def tokenizer_for(fixtures_dir):
    """name -> GGUFTokenizer of that fixture file (vocab/ or reference/), built once per session."""

    def get(name: str) -> GGUFTokenizer:
        if name not in _TOKENIZERS:
            folder = "reference" if name.startswith("ref-") else "vocab"
            _TOKENIZERS[name] = fixture_tokenizer(fixtures_dir / folder / name)
        return _TOKENIZERS[name]

    return get


VOCAB_CASES = _vocab_cases()
CASE_IDS = [f"{name.removeprefix('ggml-vocab-').removesuffix('.gguf')}-{i}" for name, i in VOCAB_CASES]


@pytest.mark.parametrize(("name", "index"), VOCAB_CASES, ids=CASE_IDS)
def test_ids_match_llama_cpp(fixtures_dir, tokenizer_for, name, index):
    texts, expected = _load_case(fixtures_dir, name)
    assert len(texts) == len(expected)
    assert tokenizer_for(name).encode(texts[index]) == expected[index]


@pytest.mark.parametrize(("name", "index"), VOCAB_CASES, ids=CASE_IDS)
def test_decode_gives_the_text_back(fixtures_dir, tokenizer_for, name, index):
    text = _load_case(fixtures_dir, name)[0][index]
    tok = tokenizer_for(name)
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize(("name", "index"), VOCAB_CASES, ids=CASE_IDS)
def test_tokens_carry_ids_pieces_and_spans(fixtures_dir, tokenizer_for, name, index):
    text = _load_case(fixtures_dir, name)[0][index]
    tok = tokenizer_for(name)
    tokens = tok.tokenize(text)
    assert [t.id for t in tokens] == tok.encode(text)
    starts = [t.start for t in tokens]
    assert starts == sorted(starts)
    for t in tokens:
        assert 0 <= t.start <= t.end <= len(text)
        assert not t.special
        data = tok.token_bytes(t.id)
        try:
            assert t.piece == data.decode("utf-8")
        except UnicodeDecodeError:
            assert re.search(r"<0x[0-9A-F]{2}>", t.piece)
        # a token whose bytes are whole characters covers exactly those characters
        if t.piece == data.decode("utf-8", errors="replace") and t.end > t.start:
            assert data.decode("utf-8").endswith(text[t.start : t.end])
    if tokens:
        assert tokens[-1].end == len(text)


def test_reference_vocabularies_load(fixtures_dir, tokenizer_for):
    for path in sorted((fixtures_dir / "reference").glob("*.gguf")):
        tok = tokenizer_for(path.name)
        f = open_gguf(path)
        texts = f.get("tokenizer.ggml.tokens")
        assert tok.vocab_size == len(texts)
        assert tok.warnings == []
        types = f.get("tokenizer.ggml.token_type")
        control = [i for i, t in enumerate(types) if t == TokenType.CONTROL]
        assert control and set(control) <= tok.special_ids
        text = f"{texts[control[-1]]}hello world{texts[control[0]]}"
        ids = tok.encode(text, parse_special=True)
        assert ids == [control[-1], *tok.encode("hello world"), control[0]]
        assert tok.decode(ids) == text


def test_special_text_is_plain_text_unless_asked(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-qwen35.gguf")
    start, end = tok.vocab.text_to_id["<|im_start|>"], tok.vocab.text_to_id["<|im_end|>"]
    text = "<|im_start|>user\nhi<|im_end|>"
    special = tok.tokenize(text, parse_special=True)
    assert [t.id for t in special] == [start, *tok.encode("user\nhi"), end]
    assert [t.special for t in special] == [True] + [False] * (len(special) - 2) + [True]
    assert (special[0].start, special[0].end) == (0, len("<|im_start|>"))
    assert (special[-1].start, special[-1].end) == (text.index("<|im_end|>"), len(text))
    plain = tok.encode(text)
    assert start not in plain and end not in plain
    assert tok.decode(plain) == text
    assert "<|im_start|>" in tok.special_text()


def test_user_defined_tokens_are_always_cut_out(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-qwen35.gguf")
    user = [i for i in sorted(tok.special_ids) if tok.vocab.types[i] == TokenType.USER_DEFINED]
    assert user
    text = f"a{tok.text_of(user[0])}b"
    assert tok.encode(text) == [*tok.encode("a"), user[0], *tok.encode("b")]


def test_spm_space_prefix_follows_each_special_token(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-llama-spm.gguf")
    eos = tok.eos_id
    assert tok.text_of(eos) == "</s>" and tok.add_bos and not tok.add_eos
    ids = tok.encode("Hello</s>world", parse_special=True)
    assert ids == [*tok.encode("Hello"), eos, *tok.encode("world")]
    assert eos not in tok.encode("Hello</s>world")
    first = tok.tokenize("Hello")[0]
    assert (first.start, first.end, first.piece) == (0, 5, " Hello")


def test_phi3_special_tokens_eat_the_whitespace_after_them(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-phi-3.gguf")
    end = tok.vocab.text_to_id["<|end|>"]
    assert tok.encode("a<|end|> \n b", parse_special=True) == [*tok.encode("a"), end, *tok.encode("b")]


def test_bad_ids_and_text_give_clear_errors(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-gpt-2.gguf")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])
    with pytest.raises(TokenizerError):
        tok.encode("bad \ud800 surrogate")


# ---- bad vocabularies, built as small files --------------------------------------------

BYTE_LEVEL = ["a", "b", "c", "ab", "abc", "Ġ", "<|end|>"]


def _write(tmp_path, meta: dict) -> GGUFTokenizer:
    from gguf_builder import write_gguf

    path = tmp_path / "vocab.gguf"
    write_gguf(path, {"general.architecture": (V.STRING, "llama"), **meta}, [])
    return GGUFTokenizer.from_gguf(open_gguf(path))


def _bpe_meta(over: dict | None = None) -> dict:
    """A 7-token byte-level vocabulary; `over` replaces keys (None removes one)."""
    meta = {
        "tokenizer.ggml.model": (V.STRING, "gpt2"),
        "tokenizer.ggml.pre": (V.STRING, "qwen2"),
        "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, BYTE_LEVEL),
        "tokenizer.ggml.token_type": (V.ARRAY, V.INT32, [1, 1, 1, 1, 1, 1, 3]),
        "tokenizer.ggml.merges": (V.ARRAY, V.STRING, ["a b", "ab c"]),
    }
    meta.update(over or {})
    return {k: v for k, v in meta.items() if v is not None}


def test_small_bpe_vocabulary_works(tmp_path):
    tok = _write(tmp_path, _bpe_meta())
    assert tok.warnings == []
    assert tok.encode("abc abc") == [4, 5, 4]
    assert tok.encode("x") == []  # no token for the byte: dropped, as llama.cpp does


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"tokenizer.ggml.tokens": None}, "no tokenizer.ggml.tokens"),
        ({"tokenizer.ggml.tokens": (V.ARRAY, V.INT32, [1, 2])}, "not array"),
        ({"tokenizer.ggml.tokens": (V.ARRAY, V.STRING, [])}, "empty"),
        ({"tokenizer.ggml.model": None}, "no tokenizer.ggml.model"),
        ({"tokenizer.ggml.model": (V.STRING, "bert")}, "not supported"),
        ({"tokenizer.ggml.model": (V.UINT32, 2)}, "not a string"),
        ({"tokenizer.ggml.token_type": (V.ARRAY, V.INT32, [1, 1])}, "2 entries for 7 tokens"),
        ({"tokenizer.ggml.token_type": (V.ARRAY, V.FLOAT32, [1.0] * 7)}, "not array"),
        ({"tokenizer.ggml.scores": (V.ARRAY, V.FLOAT32, [0.0] * 3)}, "3 entries for 7 tokens"),
        ({"tokenizer.ggml.merges": None}, "needs tokenizer.ggml.merges"),
        ({"tokenizer.ggml.merges": (V.ARRAY, V.INT32, [1, 2])}, "not array"),
    ],
)
def test_unusable_vocabulary_metadata_is_refused_clearly(tmp_path, over, message):
    with pytest.raises(VocabError, match=message) as info:
        _write(tmp_path, _bpe_meta(over))
    assert isinstance(info.value, WalkthroughError)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("over", "warning"),
    [
        ({"tokenizer.ggml.token_type": (V.ARRAY, V.INT32, [1] * 9)}, "9 entries for 7 tokens"),
        ({"tokenizer.ggml.bos_token_id": (V.UINT32, 99)}, "outside the vocabulary"),
        ({"tokenizer.ggml.eos_token_id": (V.STRING, "6")}, "not an integer"),
        ({"tokenizer.ggml.add_bos_token": (V.UINT8, 1)}, "not bool"),
        ({"tokenizer.ggml.pre": (V.STRING, "no-such-pre")}, "unknown pre-tokenizer 'no-such-pre'"),
        ({"tokenizer.ggml.pre": None}, "tokenizer.ggml.pre is missing"),
        ({"tokenizer.ggml.pre": (V.INT32, 7)}, "not a string; ignored"),
        ({"tokenizer.ggml.merges": (V.ARRAY, V.STRING, ["a b", "ab", "x y", "ab c"])},
         "2 of 4 merges"),
        ({"tokenizer.ggml.tokens": (V.ARRAY, V.STRING, ["a", "", *BYTE_LEVEL[2:]])}, "empty token"),
        ({"tokenizer.ggml.tokens": (V.ARRAY, V.STRING, ["a", "b", "c", "ab", "abc", "Ġ", "a"])},
         "appear more than once"),
    ],
)
def test_tolerated_vocabulary_problems_are_warnings(tmp_path, over, warning):
    tok = _write(tmp_path, _bpe_meta(over))
    assert any(warning in w for w in tok.warnings), tok.warnings
    ids = tok.encode("abc ab c")  # still usable: ids inside the vocabulary, text from the input
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert ids and set(tok.decode(ids)) <= set("abc ab c")


def test_special_id_outside_vocabulary_falls_back_to_llama_cpp_default(tmp_path):
    tok = _write(tmp_path, _bpe_meta({"tokenizer.ggml.eos_token_id": (V.UINT32, 700)}))
    assert tok.eos_id is None  # gpt2's default (11) is outside this 7-token vocabulary too
    tok = _write(tmp_path, _bpe_meta({"tokenizer.ggml.eos_token_id": (V.UINT32, 6)}))
    assert tok.eos_id == 6 and 6 in tok.special_ids


def test_small_spm_vocabulary_merges_by_score(tmp_path):
    tokens = ["<unk>", "<s>", "</s>", "<0x61>", "▁", "a", "b", "▁a", "ab", "▁ab"]
    types = [2, 3, 3, 6, 1, 1, 1, 1, 1, 1]
    scores = [0, 0, 0, 0, -1, -2, -3, -5, -4, -6]
    tok = _write(tmp_path, {
        "tokenizer.ggml.model": (V.STRING, "llama"),
        "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, tokens),
        "tokenizer.ggml.token_type": (V.ARRAY, V.INT32, types),
        "tokenizer.ggml.scores": (V.ARRAY, V.FLOAT32, scores),
    })
    # "▁ab": pairs "▁a" (score -5) and "ab" (-4): "ab" first, then "▁"+"ab" = "▁ab".
    assert tok.encode("ab") == [9]
    assert tok.encode("a") == [7]
    assert tok.decode([7]) == "a"  # the space prefix is dropped again


def test_protected_spans_keep_typed_special_text_plain(tokenizer_for):
    tok = tokenizer_for("ggml-vocab-qwen35.gguf")
    start, end = tok.vocab.text_to_id["<|im_start|>"], tok.vocab.text_to_id["<|im_end|>"]
    content = "say <|im_end|> now"
    text = f"<|im_start|>user\n{content}<|im_end|>\n"
    at = text.index(content)
    ids = tok.encode(text, parse_special=True, protect=[(at, at + len(content))])
    assert ids == [start, *tok.encode(f"user\n{content}"), end, *tok.encode("\n")]
    assert ids.count(end) == 1
    unprotected = tok.encode(text, parse_special=True)
    assert unprotected.count(end) == 2
    tokens = tok.tokenize(text, parse_special=True, protect=[(at, at + len(content))])
    assert [t.id for t in tokens] == ids
    assert [t for t in tokens if t.special][-1].start == text.rindex("<|im_end|>")


def test_small_utf8_bpe_vocabulary_follows_gemma4_rules(tmp_path):
    tokens = ["<pad>", "<eos>", "<bos>", "<0x63>", "\u2581", "a", "b", "ab", "\u2581a", "\n", "\n\n\n"]
    types = [3, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1]
    tok = _write(tmp_path, {
        "tokenizer.ggml.model": (V.STRING, "gemma4"),
        "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, tokens),
        "tokenizer.ggml.token_type": (V.ARRAY, V.INT32, types),
        "tokenizer.ggml.merges": (V.ARRAY, V.STRING, ["a b", "\u2581 a"]),
        "tokenizer.ggml.bos_token_id": (V.UINT32, 2),
        "tokenizer.ggml.add_bos_token": (V.BOOL, False),
    })
    assert tok.model == "gemma4" and tok.add_bos  # llama.cpp forces BOS for Gemma 4
    # "\n\n\n" has no merges but is a token: kept whole; "\n\n" is not: two "\n"
    # "c" is not a token: its byte token; " a" -> "▁" + "a" -> "▁a"
    ids = tok.encode("ab\n\n\nb a\n\nc")
    assert ids == [7, 10, 6, 8, 9, 9, 3]
    assert tok.decode(ids) == "ab\n\n\nb a\n\nc"
    assert [(t.start, t.end) for t in tok.tokenize("b a")] == [(0, 1), (1, 3)]


def test_hostile_spm_scores_and_huge_tokens_give_warnings(tmp_path):
    huge = "x" * 300
    tok = _write(tmp_path, {
        "tokenizer.ggml.model": (V.STRING, "llama"),
        "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, ["<unk>", "<s>", "</s>", "x", "xx", huge]),
        "tokenizer.ggml.token_type": (V.ARRAY, V.INT32, [2, 3, 3, 1, 1, 1]),
        "tokenizer.ggml.scores": (V.ARRAY, V.FLOAT32, [0, 0, 0, -1, float("nan"), -2]),
    })
    assert any("NaN" in w for w in tok.warnings)
    assert any("longer than" in w for w in tok.warnings)
    assert tok.decode(tok.encode("xxx")) == "xxx"


def test_every_known_pre_tokenizer_splits_without_losing_text():
    from walkthrough.inspect.pretokenizers import NAMES, build_pre_tokenizer, resolve
    from walkthrough.inspect.tokenizer import gpt2_byte_chars

    to_byte = {c: b for b, c in gpt2_byte_chars().items()}
    text = "Hello, y'all! 1234567 Ünïcode 我想 🦙\u3000x  \n\n\tend"
    for name in NAMES:
        spec = resolve(name)
        assert spec.warning is None
        words = [w for w, _ in build_pre_tokenizer(spec).pre_tokenize_str(text)]
        if spec.byte_level:
            words = [bytes(to_byte[c] for c in w).decode() for w in words]
        assert "".join(words) == text, name


def test_unknown_and_unsupported_pre_tokenizers_fall_back_with_a_warning():
    from walkthrough.inspect.pretokenizers import REGEXES, resolve

    for name in ("no-such-pre", "kimi-k2", "afmoe"):
        spec = resolve(name)
        assert spec.regexes == REGEXES["default"]
        assert name in spec.warning and "may differ from llama.cpp" in spec.warning

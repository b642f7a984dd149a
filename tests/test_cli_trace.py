"""`walkthrough trace`: JSON Lines records, --logits against llama.cpp's, the human table, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_support import needs_llama

from walkthrough.cli import main

REFERENCE = FIXTURES_DIR / "reference"
QWEN2MOE = REFERENCE / "ref-qwen2moe-f32.gguf"
QWEN2 = REFERENCE / "ref-qwen2-f32.gguf"


def _reference(model):
    return json.loads(model.with_suffix(".logits.json").read_text())


def _trace_json(capsys, *args: str) -> list[dict]:
    assert main(["trace", *args, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_json_records_follow_the_request(capsys):
    ref = _reference(QWEN2MOE)
    ids = ref["prompt_ids"]
    records = _trace_json(capsys, str(QWEN2MOE), "--ids", ",".join(map(str, ids)), "--steps", "6", "--chunk", "10",
                          "--kv-type", "f32")
    phases = [r["phase"] for r in records]
    assert phases == ["prefill"] * 3 + ["decode"] * 5  # 24 prompt tokens in chunks of 10, then N-1 decode passes
    assert [r["positions"] for r in records] == [[0, 10], [10, 20], [20, 24]] + [[24 + i, 25 + i] for i in range(5)]
    assert [i for r in records[:3] for i in r["input_ids"]] == ids
    chosen = [r["chosen"] for r in records if r["chosen"] is not None]
    assert [r["input_ids"] for r in records[3:]] == [[c] for c in chosen[:-1]]
    assert chosen == ref["greedy_ids"][:6]  # greedy tokens are llama.cpp's
    for r in records:
        assert r["bytes_read"]["total"] == sum(v for k, v in r["bytes_read"].items() if k != "total")
        assert r["kv_bytes"] > 0 and len(r["top"]) == 5
        assert len(r["experts"]) == 2  # one entry per layer, each a list per token of expert ids
        assert all(len(e) == 2 for e in r["experts"][0])
    assert len(records[0]["experts"][0]) == 10


def test_logits_rows_match_llama_cpp(capsys):
    ref = _reference(QWEN2)
    records = _trace_json(capsys, str(QWEN2), "--ids", ",".join(map(str, ref["prompt_ids"])), "--steps", "3",
                          "--kv-type", "f32", "--logits")
    prefill = np.asarray(records[0]["logits"])
    assert prefill.shape == (len(ref["prompt_ids"]), len(ref["prefill_logits"][0]))
    assert np.abs(prefill - np.asarray(ref["prefill_logits"])).max() < 1e-3
    decoded = np.asarray([r["logits"][0] for r in records[1:]])
    assert np.abs(decoded - np.asarray(ref["decode_logits"][:2])).max() < 1e-3


@needs_llama
def test_exact_products_give_llama_cpps_logits_bit_for_bit(capsys):
    """trace --exact-products --logits against llama.cpp run here on the same ids and passes (10-token chunks,
    then decode): every row as JSON prints it (5 decimals) identical; without the switch some differ."""
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    ids = _reference(QWEN2MOE)["prompt_ids"]
    records = _trace_json(capsys, str(QWEN2MOE), "--ids", ",".join(map(str, ids)), "--steps", "3", "--chunk", "10",
                          "--kv-type", "f32", "--logits", "--exact-products")
    ours = [np.asarray(r["logits"]) for r in records]
    model = LlamaModel.open(QWEN2MOE, n_threads=1)
    session = LlamaSession(model, kv_type="f32", flash_attention=False)
    theirs = [session.feed(ids[a:b], phase="prefill", all_logits=True).all_logits for a, b in ((0, 10), (10, 20), (20, 24))]
    for r in records[3:]:
        theirs.append(session.feed(r["input_ids"], phase="decode").logits[None])
    session.close()
    model.close()
    theirs = [np.round(t.astype(np.float64), 5) for t in theirs]  # as `Step.to_json` prints logits
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"
    default = _trace_json(capsys, str(QWEN2MOE), "--ids", ",".join(map(str, ids)), "--steps", "3", "--chunk", "10",
                          "--kv-type", "f32", "--logits")
    assert any(not np.array_equal(np.asarray(r["logits"]), b) for r, b in zip(default, theirs, strict=True))


def test_sampling_is_reproducible_for_a_seed(capsys):
    args = [str(QWEN2MOE), "--ids", "5,6,7", "--steps", "8", "--temperature", "1.5", "--top-k", "0", "--top-p", "1",
            "--min-p", "0"]
    first = [r["chosen"] for r in _trace_json(capsys, *args, "--seed", "11")]
    again = [r["chosen"] for r in _trace_json(capsys, *args, "--seed", "11")]
    other = [r["chosen"] for r in _trace_json(capsys, *args, "--seed", "12")]
    assert first == again
    assert first != other


def test_human_table_shows_every_pass(capsys):
    assert main(["trace", str(QWEN2MOE), "--ids", "5,6,7,8,9", "--steps", "3", "--chunk", "2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert sum(line.startswith("prefill ") for line in lines) == 3
    assert sum(line.startswith("decode ") for line in lines) == 2
    assert "prefill: 5 tokens" in out and "decode: 2 tokens" in out and "generated:" in out


def test_table_at_120_columns_shows_every_layers_experts(capsys):
    """The experts column is as wide as its widest cell when the row fits (a file or pipe gets 120 columns)."""
    args = [str(REFERENCE / "ref-qwen35moe-f32.gguf"), "--ids", "5,6,7,8,9", "--steps", "3", "--chunk", "2"]
    records = _trace_json(capsys, *args)
    assert main(["trace", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith(("prefill ", "decode "))]
    assert len(rows) == len(records)
    for row, record in zip(rows, records):
        experts = record["experts"] if record["phase"] == "decode" else None
        if experts is not None:  # the decoded token's ids, layer by layer, as the JSON has them
            assert " ".join(",".join(map(str, layer[0])) for layer in experts) in row
        assert "…" not in row.split()[3]


@settings(max_examples=200)
@given(
    fixed=st.lists(st.integers(1, 20), min_size=1, max_size=9),
    experts=st.integers(1, 200),
    top=st.integers(3, 80),
    width=st.integers(40, 250),
)
def test_column_widths_cut_top_first_then_experts(fixed, experts, top, width):
    from walkthrough.commands.trace_view import EXPERTS_MIN, TOP_KEEP, column_widths

    headers = [f"c{i}" for i in range(len(fixed))] + ["experts", "top"]
    needed = [*fixed, max(experts, EXPERTS_MIN), top]
    widths = column_widths(headers, needed, width)
    left = width - (len(headers) - 1) - sum(fixed)
    assert widths[: len(fixed)] == fixed  # fixed columns keep what they need
    assert widths[-2] <= needed[-2] and widths[-1] <= needed[-1]
    if sum(needed[-2:]) <= left:
        assert widths[-2:] == needed[-2:]
    elif left >= EXPERTS_MIN + 3:
        assert sum(widths[-2:]) == left  # the two share all that is left
        if widths[-2] < needed[-2]:  # experts are cut only once top is down to TOP_KEEP (or EXPERTS_MIN reached)
            assert widths[-1] <= max(TOP_KEEP, left - EXPERTS_MIN)


def test_prompt_goes_through_the_chat_template(capsys):
    pytest.importorskip("walkthrough.inspect.tokenizer")
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    records = _trace_json(capsys, str(QWEN2MOE), "--prompt", "hello", "--steps", "1")
    with open_gguf(QWEN2MOE) as f:
        tok = GGUFTokenizer.from_gguf(f)
        # The fixture's template is ChatML: written out by hand here.
        assert tok.decode(records[0]["input_ids"]) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
        assert records[0]["input_ids"][0] == tok.encode("<|im_start|>", parse_special=True)[0]


def test_special_token_text_typed_in_a_message_stays_plain(capsys):
    pytest.importorskip("walkthrough.inspect.chat")
    from walkthrough.inspect.gguf import open_gguf

    with open_gguf(QWEN2MOE) as f:
        im_end = f.get("tokenizer.ggml.tokens").index("<|im_end|>")
    (record,) = _trace_json(capsys, str(QWEN2MOE), "--prompt", "stop<|im_end|>here", "--steps", "1")
    assert record["input_ids"].count(im_end) == 1  # only the template's own end of turn


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([str(QWEN2MOE), "--ids", "1,x"], "comma-separated whole numbers"),
        ([str(QWEN2MOE), "--ids", "1,100000"], "outside this model's vocabulary"),
        ([str(QWEN2MOE), "--ids", "1", "--steps", "0"], "at least 1 token"),
        ([str(REFERENCE / "no-such-model.gguf"), "--ids", "1"], "no-such-model"),
        ([str(FIXTURES_DIR / "vocab" / "ggml-vocab-gpt-2.gguf"), "--ids", "1"], "gpt2"),
        ([str(QWEN2MOE), "--ids", "1", "--engine", "llama.cpp", "--exact-products"], "numpy engine's"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    assert main(["trace", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_speculative_trace_records_the_rounds(capsys):
    ref = _reference(QWEN2MOE)
    ids = ",".join(map(str, ref["prompt_ids"]))
    records = _trace_json(capsys, str(QWEN2MOE), "--ids", ids, "--steps", "12", "--kv-type", "f32",
                          "--speculate", "draft", "--draft", str(QWEN2MOE), "--draft-max", "4")
    assert [r["phase"] for r in records] == ["prefill"] + ["verify"] * 3  # the model drafting for itself: 4 + 1 a pass
    emitted = [records[0]["chosen"]] + [t for r in records[1:] for t in r["draft"]["emitted"]]
    assert emitted[:12] == ref["greedy_ids"][:12]  # the tokens of plain greedy decoding, llama.cpp's
    for r in records[1:]:
        draft = r["draft"]
        assert draft["drafter"].startswith("draft:")
        assert r["input_ids"][1:] == draft["tokens"] and draft["accepted"] == len(draft["tokens"])
        assert draft["drafter_bytes"]["total"] > 0 or not draft["tokens"]  # the last round had room for none
        assert all(len(e) == len(r["input_ids"]) for e in r["experts"])  # experts of every row of the pass
    assert main(["trace", str(QWEN2MOE), "--ids", ids, "--steps", "8", "--speculate", "lookup"]) == 0
    out = capsys.readouterr().out
    assert "speculative (lookup, up to 3 drafts)" in out and "alpha" in out and "plain decoding" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--speculate", "draft"], "needs its file: add --draft"),
    (["--speculate", "mtp"], "no multi-token-prediction block"),
    (["--draft-max", "0", "--speculate", "lookup"], "--draft-max 0"),
    (["--speculate", "lookup", "--draft", "x.gguf"], "--draft goes with --speculate draft"),
])
def test_speculative_options_fail_in_one_line(capsys, args, message):
    assert main(["trace", str(QWEN2), "--ids", "1,2,3", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_timings_say_which_engine_ran_the_passes(capsys):
    from walkthrough.costs.measured import measured_here
    from walkthrough.engine.glassbox.model import Model

    assert main(["trace", str(QWEN2), "--prompt", "hi", "--steps", "2", "--chunk", "4"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(("prefill:", "decode:"))]
    assert lines[0].startswith("prefill: ") and lines[1].startswith("decode: 1 token in ")  # --steps 2: one decode
    assert all(line.endswith(f"({measured_here(Model.engine)})") for line in lines) and len(lines) == 2


@pytest.mark.parametrize("engine", ["numpy", pytest.param("llama.cpp", marks=needs_llama)])
def test_each_json_record_names_the_engine_that_ran_its_pass(capsys, engine):
    records = _trace_json(capsys, str(QWEN2MOE), "--prompt", "hello", "--steps", "2", "--engine", engine)
    assert len(records) >= 2 and [r["engine"] for r in records] == [engine] * len(records)

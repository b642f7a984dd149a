"""Inputs that were tracebacks or runaway runs give one line (issue 25, items 9-11).

- `compare A B` where B's weights give NaN logits: the same refusal as for A, and
  `--json` never prints NaN (it raised `ValueError: Out of range float values`).
- `inspect --block NAME:INDEX` with an index that is not a whole number from 0
  (5,000 digits was Python's integer-conversion traceback).
- A prompt (or a turn's prompt grown by earlier turns) that does not fit the
  model's context with its answer is refused before any pass, naming both
  lengths and what to change, in `trace`, `compare` and `bench` (16,000 tokens
  on the tiny model's 2,048 ran past 100 s).
"""

from __future__ import annotations

import json
import math

import pytest
from hostile_support import LLAMA, assert_one_clear_line, run_cli, with_weight

from walkthrough.engine.context_fit import fit_error
from walkthrough.inspect.locate import BUNDLED_MODEL

CONTEXT = 2048  # the bundled tiny model's context_length
LONG_PROMPT = "patient " * 2100  # more tokens than the tiny model's context


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_compare_refuses_b_with_nan_logits_as_it_refuses_a(tmp_path, capsys, json_flag):
    broken = with_weight(tmp_path, "broken.gguf", "output.weight", math.nan)
    for a, b in ((LLAMA, broken), (broken, LLAMA)):
        code, out, err = run_cli(
            ["compare", a, b, "--prompt", "hi", "--steps", "2", *json_flag], capsys
        )
        assert_one_clear_line(code, err, "broken.gguf", "NaN")
        assert out == ""
        assert "RuntimeWarning" not in err


def test_compare_json_of_a_sound_pair_is_strict_json(capsys):
    code, out, _ = run_cli(
        ["compare", LLAMA, LLAMA, "--prompt", "hi", "--steps", "2", "--json"], capsys
    )
    assert code == 0
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in compare --json"))


@pytest.mark.parametrize("index", ["9" * 5000, "-1", "x", "1.5", "", " 3", "\u0663", "0x10"])
def test_block_index_that_is_not_an_index_is_one_line(capsys, index):
    code, out, err = run_cli(
        ["inspect", BUNDLED_MODEL, "--block", f"blk.1.attn_k.weight:{index}"], capsys
    )
    assert_one_clear_line(code, err, "--block blk.1.attn_k.weight:", "whole number from 0")
    assert out == "" and len(err) < 300


def test_block_index_past_the_tensor_names_its_blocks(capsys):
    code, _, err = run_cli(
        ["inspect", BUNDLED_MODEL, "--block", "blk.1.attn_k.weight:" + "9" * 20], capsys
    )
    assert_one_clear_line(code, err, "the tensor has blocks 0..")


def test_trace_refuses_a_prompt_longer_than_the_context(capsys):
    code, out, err = run_cli(["trace", "--prompt", LONG_PROMPT, "--steps", "1"], capsys)
    assert_one_clear_line(
        code, err, f"more than the model's context of {CONTEXT:,}", "shorten the prompt"
    )
    assert out == ""


def test_trace_refuses_an_answer_that_would_outgrow_the_context(capsys):
    code, _, err = run_cli(["trace", "--prompt", "patient " * 1990, "--steps", "100"], capsys)
    assert_one_clear_line(
        code, err, "(--steps) need", f"context of {CONTEXT:,}", "lower --steps to"
    )


@pytest.mark.app  # slow: a whole conversation through trace, call after call
def test_trace_refuses_a_turn_grown_past_the_context(tmp_path, capsys):
    messages = tmp_path / "turns.json"
    messages.write_text(
        json.dumps(
            [
                {"role": "user", "content": "patient " * 1100},
                {"role": "user", "content": "record " * 1100},
            ]
        )
    )
    code, out, err = run_cli(["trace", "--messages", messages, "--steps", "2"], capsys)
    assert_one_clear_line(code, err, f"more than the model's context of {CONTEXT:,}")
    assert (
        "turn 1" in out
    )  # the first turn fitted and ran; the second was refused before its passes


def test_compare_and_bench_refuse_what_does_not_fit(capsys):
    code, _, err = run_cli(
        ["compare", BUNDLED_MODEL, BUNDLED_MODEL, "--prompt", LONG_PROMPT, "--steps", "1"], capsys
    )
    assert_one_clear_line(code, err, f"context of {CONTEXT:,}")
    code, _, err = run_cli(["bench", "--prompt-tokens", "2000", "--output-tokens", "100"], capsys)
    assert_one_clear_line(
        code,
        err,
        "2,000 tokens and an answer of up to 100 (--output-tokens)",
        "lower --output-tokens to 48 or lower --prompt-tokens",
    )


def test_the_fit_by_hand():
    assert fit_error(2048, 2048, 0, "--steps") is None
    assert fit_error(2048, 2000, 48, "--steps") is None
    assert (
        fit_error(None, 10**6, 10, "--steps") is None
    )  # no context declared: nothing to check against
    assert "lower --max-tokens to 48 " in fit_error(2048, 2000, 49, "--max-tokens")
    assert fit_error(2048, 2049, 1, "--max-tokens").startswith("the prompt has 2,049 tokens")

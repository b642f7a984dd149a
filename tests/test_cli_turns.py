"""`walkthrough trace` over several requests: turns reuse the cache and give a fresh run's tokens; the four calls."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType
from gguf_builder import rewrite_gguf

from walkthrough.cli import main

REFERENCE = FIXTURES_DIR / "reference"
HYBRID = REFERENCE / "ref-qwen35moe-f32.gguf"
DENSE_MOE = REFERENCE / "ref-qwen2moe-f32.gguf"


@pytest.fixture(scope="module")
def four_calls_model(tmp_path_factory) -> str:
    """The dense MoE reference with a 2,048-token context: the four calls' requests (about 900 tokens with
    their system prompt) are longer than its declared 256, which trace refuses."""
    path = tmp_path_factory.mktemp("context") / "ref-qwen2moe-2048.gguf"
    return str(rewrite_gguf(DENSE_MOE, path, {"qwen2moe.context_length": (GGUFValueType.UINT32, 2048)}))


def _records(capsys, *args: str) -> list[dict]:
    assert main(["trace", *args, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _turn_passes(records: list[dict], label: str) -> list[dict]:
    return [r for r in records if r.get("turn") == label and "phase" in r]


def _conversation(tmp_path) -> str:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "abc"},
                {"role": "user", "content": "def"}]
    path = tmp_path / "turns.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return str(path)


def test_a_second_user_message_reuses_the_first_turn(capsys, tmp_path):
    # One token generated: it is chosen, never fed, so the cache holds the first prompt exactly, and the
    # second request (prompt, answer, new message) continues it.
    records = _records(capsys, str(HYBRID), "--messages", _conversation(tmp_path), "--steps", "1", "--kv-type", "f32")
    one, two = _turn_passes(records, "turn 1"), _turn_passes(records, "turn 2")
    held = sum(len(r["input_ids"]) for r in one)
    assert two[0]["reused"] == held and two[0]["reuse"]["stop"] == "held"
    assert two[0]["positions"][0] == held and all("reused" not in r for r in two[1:])
    summaries = {r["turn"]: r for r in records if "phase" not in r and "turn" in r}
    assert summaries["turn 2"]["reuse"]["computed"] == sum(len(r["input_ids"]) for r in two)
    assert summaries["turn 2"]["checkpoints"] > 0 and summaries["turn 2"]["checkpoint_bytes"] > 0
    # The second request from scratch chooses the same token with the same probabilities.
    prompt = [i for r in one + two for i in r["input_ids"]]
    fresh = _records(capsys, str(HYBRID), "--ids", ",".join(map(str, prompt)), "--steps", "1", "--kv-type", "f32")
    assert fresh[0]["chosen"] == two[-1]["chosen"]
    assert np.allclose([t["p"] for t in two[-1]["top"]], [t["p"] for t in fresh[0]["top"]], atol=1e-5)


def test_an_answer_that_does_not_come_back_as_the_same_tokens_is_explained(capsys, tmp_path):
    records = _records(capsys, str(HYBRID), "--messages", _conversation(tmp_path), "--steps", "5", "--kv-type", "f32")
    second = next(r for r in records if r.get("turn") == "turn 2" and "phase" not in r)
    held = second["reuse"]["held"]
    prompt_one = next(r for r in records if r.get("turn") == "turn 1" and "phase" not in r)["prompt_tokens"]
    if second["reuse"]["stop"] == "held":
        assert second["reuse"]["reused"] == held
    else:  # the random model's bytes are seldom valid UTF-8: the break lies in its answer, and says so
        assert prompt_one <= second["reuse"]["differs_at"] < held
        assert second["cause"]["held_origin"] == "the model's answer"
        assert second["cause"]["cause"] in ("bytes", "retokenized", "answer")
        assert second["reuse"]["checkpoint"] == second["reuse"]["reused"] <= second["reuse"]["differs_at"]


def test_the_four_calls_say_what_each_reused_and_why(capsys, four_calls_model):
    records = _records(capsys, four_calls_model, "--prompt", "abc abc", "--four-calls", "--steps", "1")
    turns = [r for r in records if "turn" in r and "phase" not in r]
    assert [t["turn"] for t in turns] == ["request", "follow-up", "edit", "new chat"]
    assert [t["reuse"]["stop"] for t in turns] == ["empty", "held", "differs", "differs"]
    assert turns[1]["reuse"]["reused"] == turns[0]["prompt_tokens"]  # the one answer token was never fed
    assert turns[2]["cause"]["cause"] == "edited" and turns[2]["cause"]["words"] == "message 1 (user) was changed"
    assert next(r for r in records if r.get("turn") == "edit" and "phase" in r)["cause"] == turns[2]["cause"]
    for t in turns:
        assert t["reuse"]["reused"] + t["reuse"]["computed"] == t["prompt_tokens"]
        assert t["cost"]["computed"] == t["reuse"]["computed"]
    summary = records[-1]["summary"]
    assert summary["reused"] == sum(t["reuse"]["reused"] for t in turns)
    assert summary["computed"] == sum(t["cost"]["computed"] for t in turns)


@pytest.mark.app  # slow: times a cold start in a fresh process
def test_measure_adds_without_reuse_and_cold_and_warm_starts(capsys, four_calls_model):
    records = _records(capsys, four_calls_model, "--prompt", "abc", "--four-calls", "--steps", "2", "--measure")
    turns = [r for r in records if "turn" in r and "phase" not in r]
    for t in turns:  # the same request from an empty cache computes every prompt token
        assert t["without_reuse"]["computed"] == t["prompt_tokens"]
        assert t["flops_saved"] == t["without_reuse"]["flops"] - t["cost"]["flops"]
    assert turns[1]["flops_saved"] > 0
    start = next(r["start"] for r in records if "start" in r)  # the lifecycle record follows it
    cold = start["cold"]
    assert cold["first_token"] > cold["imports"] + cold["open"] + cold["passes"] - 1e-3
    assert min(cold["imports"], cold["passes"], start["warm"]["first_token"]) > 0

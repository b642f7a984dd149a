"""Quality of the bundled tiny model, run with our own engine, tokenizer and chat template.

What "right" means comes from the corpus generator (`assets/corpus.py`), independently of the
model: which record drugs interact with the new drug, and on which line each one sits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_model_support import (
    MAX_NEW_HELD_OUT,
    MODEL_PATH,
    Runner,
    cited_lines,
    corpus,
    record_line,
)

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import load_messages

MAX_NEW = 120  # the default answer must end within this many tokens


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner(MODEL_PATH)


@pytest.fixture(scope="module")
def default_run(runner: Runner) -> tuple[str, list]:
    return runner.answer(load_messages(corpus.DEFAULT_REQUEST_PATH), MAX_NEW)


def test_default_request_file_is_the_generated_one() -> None:
    shipped = json.loads(corpus.DEFAULT_REQUEST_PATH.read_text(encoding="utf-8"))
    assert shipped == corpus.default_request().messages


@pytest.mark.app  # slow: the tiny model's whole default request
def test_default_answer_names_and_cites_the_interacting_drug(default_run) -> None:
    text, _ = default_run
    print(text)
    expected = corpus.default_request()
    user = expected.messages[1]["content"]
    assert text.endswith(corpus.IM_END), f"no {corpus.IM_END} within {MAX_NEW} tokens: {text!r}"
    assert expected.interacting, "the default request should ask about an interacting drug"
    for drug in expected.interacting:
        assert drug in text
        assert f"(line {record_line(user, drug)})" in text
    assert corpus.drugs_named(text, corpus.load_facts()) <= corpus.drugs_named(user, corpus.load_facts())


@pytest.mark.app  # slow: the tiny model's whole default request
def test_every_layer_uses_half_its_experts_on_the_default_request(runner, default_run) -> None:
    _, steps = default_run
    n_expert = runner.model.config.n_experts
    for layer in range(len(steps[0].layers)):
        used = set()
        for step in steps:
            used.update(step.layers[layer].woken)
        print(f"layer {layer}: {len(used)}/{n_expert} experts used")
        assert len(used) >= n_expert / 2, f"layer {layer} used only {sorted(used)}"


@pytest.mark.quality  # 20 greedy answers: 30-110 s on 2 cores; run only when -m names it
def test_held_out_records_name_only_record_drugs(runner) -> None:
    facts = corpus.load_facts()
    examples = corpus.make_examples(corpus.EVAL_SEED, 20, facts)
    named_ok = named_wrong = 0
    citations = citations_right = 0
    for ex in examples:
        text, _ = runner.answer(ex.messages, MAX_NEW_HELD_OUT)
        user = ex.messages[1]["content"]
        in_record = corpus.drugs_named(user, facts)
        named = corpus.drugs_named(text, facts)
        named_ok += bool(named & in_record)
        named_wrong += bool(named - in_record)
        for drug, line in cited_lines(text):
            citations += 1
            citations_right += drug in ex.record_drugs and line == record_line(user, drug)
    print(f"named a drug from the record: {named_ok}/20 = {named_ok / 20:.0%}; "
          f"named a drug not in the record: {named_wrong}/20; "
          f"interactions cited with the right line: {citations_right}/{citations}")
    assert named_ok >= 16
    assert named_wrong == 0


def test_vocabulary_is_a_few_thousand_tokens(runner) -> None:
    print(f"vocabulary: {runner.tok.vocab_size} tokens")
    assert runner.tok.vocab_size >= 3000


def test_training_script_runs_a_few_steps(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import export_gguf
    import train

    summary = train.train(tmp_path, n_examples=24, steps=2, batch=2, lr=1e-3, threads=1,
                          config_overrides={"n_embd": 64, "n_layer": 2}, log_every=1)
    assert summary["steps"] == 2 and summary["final_loss"] > 0
    out = export_gguf.export(tmp_path, tmp_path / "smoke.gguf")
    f = open_gguf(out)
    assert f.get("general.architecture") == "qwen2moe"
    assert f.get("qwen2moe.block_count") == 2
    assert "blk.1.ffn_gate_exps.weight" in f.tensors

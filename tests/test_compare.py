"""`compare` on a known pair: the tiny model (Q8_0) and a copy requantized to Q4_0 with gguf.quants.

Expected values are derived independently: each model's logits are taken from
its own decode passes (one token per pass, not the single teacher-forced pass
`compare` runs), and KL, agreement and perplexity are written out from their
definitions here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType as Q

from tests.requantize import requantize
from walkthrough.engine.compare import check_same_vocabulary, compare_models, kl_divergence
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.surprisal import surprisal
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.requant import file_size_at

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
REFERENCE = ROOT.parent / "shared" / "fixtures" / "reference"
PROMPT = [5, 17, 200, 33, 41, 1024, 7, 9, 300, 12, 88, 2048]  # any ids of the tiny vocabulary
STEPS = 6


@pytest.fixture(scope="module")
def q4_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("requant") / "tiny-q4_0.gguf"
    requantize(TINY, path, Q.Q4_0)
    return path


def _stepwise_logits(model: Model, tokens: list[int]) -> np.ndarray:
    """[n, V] logits, one pass per token."""
    session = Session(model)
    return np.stack([session.feed([t], phase="decode").logits for t in tokens]).astype(np.float64)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_requantized_file_has_the_size_the_block_view_predicts(q4_path):
    with open_gguf(TINY) as f:
        assert file_size_at(f, Q.Q4_0) == q4_path.stat().st_size


def test_kl_and_top1_on_the_known_pair(q4_path):
    # Plain float products: llama.cpp's activation rounding can move a value across a rounding step between
    # one pass and one-token passes (see engine/glassbox/session.py), which would blur the comparison of the two paths.
    a, b = Model.open(TINY, match_llama_cpp=False), Model.open(q4_path, match_llama_cpp=False)
    result = compare_models(a, b, PROMPT, STEPS)
    tokens = result.tokens
    assert tokens[: len(PROMPT)] == PROMPT and len(tokens) == len(PROMPT) + STEPS
    la, lb = _stepwise_logits(a, tokens), _stepwise_logits(b, tokens)
    pa, pb = _softmax(la), _softmax(lb)
    kl = np.sum(pa * (np.log(pa) - np.log(pb)), axis=-1)
    # One teacher-forced pass against one pass per token: float summation order only.
    np.testing.assert_allclose(result.kl, kl, rtol=1e-3, atol=1e-5)
    assert 0 < result.kl.mean() < 0.5  # Q4_0 moves the distributions, a little
    same = la.argmax(-1) == lb.argmax(-1)
    np.testing.assert_array_equal(result.top1, same)
    nll_a = -np.log(pa[np.arange(len(tokens) - 1), tokens[1:]])
    np.testing.assert_allclose(result.surprisal_a, nll_a, atol=1e-4)
    ppl = result.perplexities()
    cut = len(PROMPT) - 1
    assert ppl["a"]["request"]["perplexity"] == pytest.approx(math.exp(nll_a[:cut].mean()), rel=1e-3)
    # Greedy answers: A's answer is its own best token at every answer position.
    assert [int(x) for x in la.argmax(-1)[len(PROMPT) - 1:-1]] == result.answer
    parted = [i for i, t in enumerate(result.answer) if int(lb[len(PROMPT) - 1 + i].argmax()) != t]
    assert result.parted_at == (parted[0] if parted else None)


def test_a_model_against_itself():
    a = Model.open(TINY)
    result = compare_models(a, a, PROMPT, 3)
    assert np.all(result.kl == 0) and result.top1.all() and np.all(result.top5 == 1.0)
    assert result.parted_at is None
    np.testing.assert_array_equal(result.surprisal_a, result.surprisal_b)


def test_kl_by_hand_and_surprisal_by_hand():
    p, q = np.log([[0.5, 0.5]]), np.log([[0.9, 0.1]])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert kl_divergence(p, q)[0] == pytest.approx(expected)
    logits = np.array([[2.0, 0.0, 0.0]])
    assert surprisal(logits, [1])[0] == pytest.approx(-math.log(1 / (math.e**2 + 2)))


def test_different_vocabularies_refused():
    with pytest.raises(WalkthroughError, match="same vocabulary"):
        check_same_vocabulary(Model.open(TINY), Model.open(REFERENCE / "ref-llama-f32.gguf"))


def test_cli_compare_json(q4_path, capsys):
    from walkthrough.cli import main

    ids = ",".join(map(str, PROMPT))
    assert main(["compare", str(TINY), str(q4_path), "--ids", ids, "--steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prompt_tokens"] == len(PROMPT) and len(out["answer"]) == 3
    assert len(out["per_position"]["kl"]) == len(PROMPT) + 3
    assert out["kl"]["max"] >= out["kl"]["p99"] >= 0
    assert main(["compare", str(TINY), str(REFERENCE / "ref-llama-f32.gguf"), "--ids", "1,2"]) == 2
    assert "same vocabulary" in capsys.readouterr().err


def test_where_the_answers_part_shows_each_token_as_the_app_does():
    import io

    from walkthrough.commands.compare import print_comparison
    from walkthrough.textsafe import token_text

    answer = {"perplexity": 1.5, "tokens": 2}
    report = {"a": "a.gguf", "b": "b.gguf", "tokens": 5, "prompt_tokens": 3, "answer": [1, 2],
              "answer_text": "x", "kl": {"mean": 0.1, "p99": 0.2, "max": 0.3}, "top1_agreement": 0.5,
              "top5_agreement": 1.0, "perplexity": {"a": {"request": answer, "answer": answer},
                                                    "b": {"request": answer, "answer": answer}},
              "parted_at": 1, "parted": {"a_piece": " the", "b_piece": "\n\x1b[31m"}}
    out = io.StringIO()
    print_comparison(report, out=out)
    last = out.getvalue().splitlines()[-1]
    assert last == f"greedy answers part at answer token 1: A {token_text(' the')}, B {token_text(chr(10) + chr(27) + '[31m')}"
    assert "␣the" in last and "↵" in last and "\x1b" not in last

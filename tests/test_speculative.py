"""Speculative decoding gives the tokens of plain decoding: every reference model, every drafter, greedy and seeded.

The reference for the tokens is plain decoding with the same seed and settings
(and, greedy, llama.cpp's own continuation from the fixture's logits file); the
reference for acceptance is a model drafting for itself, which at temperature 0
must agree with every draft. The MTP block runs on a random-weight qwen35moe
file written with an MTP block (`test_qwen35moe.write_qwen35moe`), and its first
position is checked against the block written out by hand from llama.cpp's graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from test_qwen35moe import PROMPT as HYBRID_PROMPT
from test_qwen35moe import Shape, write_qwen35moe

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Cancelled, Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.engine.serving.drafters import DraftModel, PromptLookup, lookup
from walkthrough.engine.serving.mtp import MTPBlock, MTPDrafter
from walkthrough.engine.serving.speculative import prefill, speculate
from walkthrough.errors import WalkthroughError

REFERENCE = FIXTURES_DIR / "reference"
FIXTURES = sorted(REFERENCE.glob("ref-*.gguf"))
ARCH = sorted((Path(__file__).parent / "fixtures" / "arch").glob("ref-*-f32.gguf"))  # the newer architectures
GREEDY = SamplerSettings(temperature=0.0)
SEEDED = SamplerSettings(temperature=0.9, seed=11)
N_NEW = 16


def _prompt(path) -> list[int]:
    return json.loads(path.with_suffix(".logits.json").read_text())["prompt_ids"]


def _plain(model: Model, ids: list[int], settings: SamplerSettings, chunk: int | None, n: int) -> tuple[list, Session]:
    session, sampler = Session(model, kv_type="f32"), Sampler(settings)
    out = [s.chosen for s in session.prefill(ids, chunk=chunk, sampler=sampler)][-1:]
    out += [s.chosen for s in session.decode(sampler, n - 1, stop_ids=())]
    return out, session


def _speculative(model: Model, drafter, ids: list[int], settings: SamplerSettings, chunk: int | None, n: int,
                 k: int = 3) -> tuple[list, Session, list]:
    session = Session(model, kv_type="f32", keep_hidden=drafter.needs_hidden)
    sampler = Sampler(settings)
    out = [s.chosen for s in prefill(session, drafter, ids, chunk=chunk, sampler=sampler)][-1:]
    rounds = list(speculate(session, sampler, drafter, n - 1, k=k, stop_ids=()))
    for step in rounds:
        out += step.generated
    return out, session, rounds


@pytest.fixture(scope="module")
def models() -> dict[str, Model]:
    return {path.stem: Model.open(path) for path in FIXTURES}


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("name", [p.stem for p in FIXTURES])
def test_prompt_lookup_gives_the_plain_tokens(models, name: str, settings: SamplerSettings):
    model, ids = models[name], _prompt(REFERENCE / f"{name}.gguf")
    _check_lookup(model, ids, settings, REFERENCE / f"{name}.logits.json")


@pytest.mark.app  # slow: every newer architecture, with both samplers
@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("path", ARCH, ids=[p.stem for p in ARCH])
def test_prompt_lookup_gives_the_plain_tokens_on_the_newer_architectures(path, settings: SamplerSettings):
    _check_lookup(Model.open(path), _prompt(path), settings, path.with_suffix(".logits.json"))


def _check_lookup(model: Model, ids: list[int], settings: SamplerSettings, reference) -> None:
    plain, plain_session = _plain(model, ids, settings, 7, N_NEW)
    spec, session, rounds = _speculative(model, PromptLookup(), ids, settings, 7, N_NEW)
    assert spec == plain
    if settings is GREEDY:  # and plain greedy decoding is llama.cpp's
        assert spec == json.loads(reference.read_text())["greedy_ids"][:N_NEW]
    assert session.tokens == plain_session.tokens and session.pending == plain_session.pending
    assert session.position == plain_session.position == len(ids) + N_NEW - 1
    # the rolled-back cache holds what plain decoding wrote, up to float summation order over 4 rows or 1
    for layer in session.cache.layers:
        keys, plain_keys = session.cache.keys(layer), plain_session.cache.keys(layer)
        assert np.abs(keys - plain_keys).max() <= 1e-4 * max(1.0, float(np.abs(plain_keys).max()))
    for layer, state in session.cache.states.items():
        for key, array in state.items():
            assert np.allclose(array, plain_session.cache.states[layer][key], atol=1e-4)
    assert sum(len(r.generated) for r in rounds) == N_NEW - 1
    for r in rounds:
        d = r.draft
        assert r.phase == "verify" and r.input_ids[1:] == d.tokens and len(d.tokens) <= 3
        assert d.emitted[: d.accepted] == d.tokens[: d.accepted] and len(d.emitted) == d.accepted + 1
        assert r.kv_len == r.start + d.accepted + 1


@pytest.mark.app  # slow: a draft model's passes beside each target's, with both samplers
@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("name", ["ref-qwen3moe-q8_0", "ref-qwen35moe-f32", "ref-llama-q4_0"])
def test_a_draft_model_gives_the_plain_tokens(models, name: str, settings: SamplerSettings):
    model, ids = models[name], _prompt(REFERENCE / f"{name}.gguf")
    plain, _ = _plain(model, ids, settings, None, N_NEW)
    for draft in ("ref-qwen2-f32", "ref-qwen35moe-f32"):  # dense and hybrid drafts, same 268-token vocabulary
        spec, _, rounds = _speculative(model, DraftModel(models[draft], model), ids, settings, 5, N_NEW, k=4)
        assert spec == plain, draft
        assert all(r.draft.bytes_read["total"] > 0 for r in rounds if r.draft.tokens)


@pytest.mark.parametrize("name", ["ref-qwen2moe-f32", "ref-qwen35moe-f32", "ref-qwen3-f16"])
def test_a_model_drafting_for_itself_is_always_right_at_temperature_0(models, name: str):
    model, ids = models[name], _prompt(REFERENCE / f"{name}.gguf")
    _spec, _, rounds = _speculative(model, DraftModel(model, model), ids, GREEDY, None, N_NEW, k=4)
    assert all(r.draft.accepted == len(r.draft.tokens) for r in rounds)
    assert [len(r.generated) for r in rounds] == [5, 5, 5]  # 15 tokens in three passes of 4 drafts + 1
    assert all(r.draft.replay is None for r in rounds)  # nothing rejected: nothing to replay


def test_a_hybrid_model_replays_the_kept_tokens_after_a_rejection(models):
    model, ids = models["ref-qwen35moe-f32"], _prompt(REFERENCE / "ref-qwen35moe-f32.gguf")
    _, _, rounds = _speculative(model, DraftModel(models["ref-qwen2-f32"], model), ids, GREEDY, None, N_NEW, k=4)
    rejected = [r for r in rounds if r.draft.rejected]
    assert rejected
    for r in rejected:  # the restored state is advanced again over the pending token and the accepted drafts
        assert r.draft.replay is not None and r.draft.replay["state"] == model.card.state_bytes


def test_a_stop_token_ends_the_round_and_the_answer(models):
    model, ids = models["ref-qwen2-f32"], _prompt(REFERENCE / "ref-qwen2-f32.gguf")
    plain, _ = _plain(model, ids, GREEDY, None, 6)
    session = Session(model, kv_type="f32")
    sampler = Sampler(GREEDY)
    list(session.prefill(ids, sampler=sampler))
    # the model drafting for itself proposes plain[1:4]; the third draft is made the end token
    (step,) = speculate(session, sampler, DraftModel(model, model), 10, k=3, stop_ids=[plain[3]])
    assert step.stopped and step.generated == plain[1:4] and step.draft.accepted == 3
    assert session.pending == plain[3] and session.tokens == ids + plain[:3]  # an end token is chosen, never fed


def _prefilled(model: Model, ids: list[int]) -> tuple[Session, Sampler]:
    session, sampler = Session(model, kv_type="f32"), Sampler(GREEDY)
    list(session.prefill(ids, sampler=sampler))
    return session, sampler


def test_the_pass_hook_runs_in_every_pass_of_a_round_and_stops_it_in_the_draft_models_pass(models):
    model, ids = models["ref-qwen2-f32"], _prompt(REFERENCE / "ref-qwen2-f32.gguf")
    n = model.config.n_layers
    session, sampler = _prefilled(model, ids)
    calls: list[tuple[int, int]] = []
    rounds = speculate(session, sampler, DraftModel(model, model), 10, k=3, progress=lambda *c: calls.append(c))
    next(rounds)
    assert calls == [(i, n) for i in range(n + 1)] * 4  # three draft passes (all accepted), the verification

    session, sampler = _prefilled(model, ids)
    held, calls = session.position, []

    def stop(done: int, total: int) -> None:
        calls.append((done, total))
        if len(calls) == n + 3:  # the second draft pass, after its first layer
            raise Cancelled()

    with pytest.raises(Cancelled):
        next(speculate(session, sampler, DraftModel(model, model), 10, k=3, progress=stop))
    assert len(calls) == n + 3 and session.position == held  # no layer after, nothing verified


def test_the_mtp_drafter_calls_the_pass_hook_before_each_draft(mtp_model: Model):
    session = Session(mtp_model, kv_type="f32", keep_hidden=True)
    drafter, sampler = MTPDrafter(mtp_model), Sampler(GREEDY)
    list(prefill(session, drafter, HYBRID_PROMPT, sampler=sampler))
    calls: list[tuple[int, int]] = []
    next(speculate(session, sampler, drafter, 10, k=3, progress=lambda *c: calls.append(c)))
    n = mtp_model.config.n_layers
    assert calls[:3 + n + 1] == [(0, 3), (1, 3), (2, 3)] + [(i, n) for i in range(n + 1)]


def test_lookup_finds_the_latest_longest_ngram():
    assert lookup([5, 6, 7, 8, 5, 6], 2) == [7, 8]  # the module docstring's example
    assert lookup([1, 2, 9, 3, 2, 8, 1, 2], 3) == [9, 3, 2]  # [1, 2] beats the later 1-gram [2]
    assert lookup([2, 7, 2, 8, 2], 2) == [8, 2]  # the latest occurrence of [2] wins
    assert lookup([1, 2, 3], 2) == []
    assert lookup([4, 4], 3) == [4]  # only what the context holds


def test_a_draft_model_with_another_vocabulary_is_refused(models):
    from tiny_model_support import MODEL_PATH

    with pytest.raises(WalkthroughError, match="another vocabulary"):
        DraftModel(Model.open(MODEL_PATH), models["ref-qwen2-f32"])


# ---- multi-token prediction ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory) -> Model:
    return Model.open(write_qwen35moe(tmp_path_factory.mktemp("mtp") / "mtp.gguf", Shape(mtp=1), seed=5))


@pytest.mark.app  # slow: an MTP model's rounds beside its plain passes, with both samplers
@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_mtp_drafting_gives_the_plain_tokens(mtp_model: Model, settings: SamplerSettings):
    plain, _ = _plain(mtp_model, HYBRID_PROMPT, settings, 4, 20)
    drafter = MTPDrafter(mtp_model)
    spec, session, rounds = _speculative(mtp_model, drafter, HYBRID_PROMPT, settings, 4, 20)
    assert spec == plain
    assert drafter.cache.length == session.position  # the block's cache covers every kept position
    mtp_tensors = sum(t.nbytes for n, t in mtp_model.file.tensors.items() if n.startswith("blk.4.nextn."))
    for r in rounds:
        assert len(r.draft.tokens) == min(3, 19 - sum(len(x.generated) for x in rounds[: rounds.index(r)]) - 1)
        assert r.draft.bytes_read["total"] > mtp_tensors  # the block's own tensors, read for each pass


def test_a_file_without_an_mtp_block_is_refused(models):
    with pytest.raises(WalkthroughError, match="no multi-token-prediction block"):
        MTPDrafter(models["ref-qwen35moe-f32"])


def _rms(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def test_the_mtp_block_at_the_first_position_is_llama_cpps_graph_written_out(mtp_model: Model):
    # At position 0 attention sees one key: its weight is 1 and the output is that position's values, so the
    # whole block is products and norms (src/models/qwen35moe.cpp, graph_mtp), written here from the raw tensors.
    s = Shape()
    get = mtp_model.weights.get
    d, L, token = s.n_embd, s.n_layers, 17
    h = np.random.default_rng(0).standard_normal(d).astype(np.float32)
    p = f"blk.{L}."
    e = _rms(get("token_embd.weight")[token], get(p + "nextn.enorm.weight"))
    g = _rms(h, get(p + "nextn.hnorm.weight"))
    x = get(p + "nextn.eh_proj.weight").reshape(d, 2 * d) @ np.concatenate([e, g])
    a = _rms(x, get(p + "attn_norm.weight"))
    qg = (get(p + "attn_q.weight").reshape(-1, d) @ a).reshape(s.n_head, 2, s.head_dim)
    v = (get(p + "attn_v.weight").reshape(-1, d) @ a).reshape(s.n_head_kv, s.head_dim)
    group = s.n_head // s.n_head_kv
    heads = np.stack([v[i // group] for i in range(s.n_head)]) / (1 + np.exp(-qg[:, 1]))  # values x sigmoid(gate)
    x = x + get(p + "attn_output.weight").reshape(d, -1) @ heads.ravel()
    m = _rms(x, get(p + "post_attention_norm.weight"))
    router = get(p + "ffn_gate_inp.weight").reshape(-1, d) @ m
    probs = np.exp(router - router.max()) / np.exp(router - router.max()).sum()
    top = np.argsort(-probs)[: s.n_used]
    silu = lambda z: z / (1 + np.exp(-z))
    moe = sum(probs[i] / probs[top].sum() * get(p + "ffn_down_exps.weight")[i]
              @ (silu(get(p + "ffn_gate_exps.weight")[i] @ m) * (get(p + "ffn_up_exps.weight")[i] @ m)) for i in top)
    shared = get(p + "ffn_down_shexp.weight") @ (silu(get(p + "ffn_gate_shexp.weight") @ m)
                                                  * (get(p + "ffn_up_shexp.weight") @ m))
    x = x + moe + shared / (1 + np.exp(-get(p + "ffn_gate_inp_shexp.weight").ravel() @ m))
    expected = get("output.weight") @ _rms(x, get("output_norm.weight"))
    block = MTPBlock(mtp_model)
    cache = block.new_cache("f32")
    meter = mtp_model.meter()
    logits, _, trace = block.forward(np.array([token]), h[None, :], 0, cache, meter)
    assert np.abs(logits[0] - expected).max() < 1e-3 * max(1.0, float(np.abs(expected).max()))
    assert sorted(trace.experts[0].tolist()) == sorted(top.tolist())


# ---- the tiny model on the default request -------------------------------------------------------

@pytest.mark.app  # slow: the whole default request, twice
@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_the_tiny_models_answer_is_the_same_with_prompt_lookup(settings: SamplerSettings):
    from tiny_model_support import ASSETS, Runner

    from walkthrough.inspect.template import render

    runner = Runner()
    messages = json.loads((ASSETS / "default_request.json").read_text())
    ids = runner.tok.encode(render(runner.template, messages, add_generation_prompt=True), parse_special=True)
    plain, _ = _plain(runner.model, ids, settings, 128, 24)
    spec, _, rounds = _speculative(runner.model, PromptLookup(), ids, settings, 128, 24)
    assert spec == plain
    assert len(rounds) < 23  # the answer copies line numbers from the record: some drafts are right


def test_round_figures_follow_the_docstring_example():
    from walkthrough.engine.serving.rounds import expected_tokens

    # 4 rounds of 3 drafts with 2, 0, 3, 1 accepted: alpha 0.5, 1 + 0.5 + 0.25 + 0.125 tokens expected per round
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(1.0, 3) == 4 and expected_tokens(0.0, 3) == 1

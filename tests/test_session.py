"""Session behaviour on the reference models: chunk-size invariance, bytes and KV consistent with the card, stops."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES_DIR

from walkthrough.engine.glassbox.config import UnsupportedArchitecture
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings, sample_stages
from walkthrough.errors import WalkthroughError

PROMPT = [236, 105, 56, 190, 230, 74, 97, 21, 254, 256, 184, 149, 150]  # any ids below the 268-token vocabulary


def _models() -> list:
    out = []
    for path in sorted((FIXTURES_DIR / "reference").glob("ref-*.gguf")):
        try:
            out.append(pytest.param(Model.open(path), id=path.stem))
        except UnsupportedArchitecture:
            continue
    return out


MODELS = _models()
MOE = [p for p in MODELS if p.values[0].card.is_moe]


def _greedy_run(model: Model, chunk: int | None, n_new: int = 6, kv_type: str = "f32"):
    session = Session(model, kv_type=kv_type)
    steps = list(session.prefill(PROMPT, chunk=chunk, sampler=Sampler.greedy()))
    steps += list(session.decode(Sampler.greedy(), n_new - 1, stop_ids=()))
    return session, steps


@pytest.mark.parametrize("model", MODELS)
def test_chunk_size_changes_nothing_but_the_passes(model: Model):
    # Plain float products: chunking may only change float summation order (about 1e-6). With llama.cpp's
    # input rounding (the default), such differences can move a value across a rounding step, as in
    # llama.cpp itself; the chosen tokens must still agree (checked on the default model below).
    exact = Model(model.file, card=model.card, match_llama_cpp=False)
    whole, whole_steps = _greedy_run(exact, None)
    default_tokens = [s.chosen for s in _greedy_run(model, None)[1] if s.chosen is not None]
    for chunk in (1, 4, 5):
        assert [s.chosen for s in _greedy_run(model, chunk)[1] if s.chosen is not None] == default_tokens
        split, split_steps = _greedy_run(exact, chunk)
        prefill = [s for s in split_steps if s.phase == "prefill"]
        assert len(prefill) == -(-len(PROMPT) // chunk)
        assert [s.positions for s in prefill][-1] == (len(PROMPT) - (len(PROMPT) - 1) % chunk - 1, len(PROMPT))
        assert [s.chosen for s in split_steps if s.chosen is not None] == [
            s.chosen for s in whole_steps if s.chosen is not None
        ]
        assert np.allclose(split_steps[-1].logits, whole_steps[-1].logits, atol=1e-5)
        for layer in split.cache.layers:  # float32 rounding of different matmul batch sizes, relative to the scale
            for ours, theirs in ((split.cache.keys(layer), whole.cache.keys(layer)),
                                 (split.cache.values(layer), whole.cache.values(layer))):
                assert np.allclose(ours, theirs, atol=1e-5 * max(1.0, float(np.abs(theirs).max())))
        for layer, state in split.cache.states.items():  # hybrid models: the fixed states agree too
            for name, array in state.items():
                assert np.allclose(array, whole.cache.states[layer][name], atol=1e-5)
        if model.card.is_moe:  # experts chosen per prompt token, in every layer but the last (see model.block)
            for i in range(model.config.n_layers - 1):
                ours = np.concatenate([s.layers[i].experts for s in prefill])
                assert (ours == whole_steps[0].layers[i].experts).all()


@pytest.mark.parametrize("kv_type", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("model", MODELS)
def test_kv_bytes_are_the_cards_per_token_figure_times_length(model: Model, kv_type: str):
    session, steps = _greedy_run(model, 4, kv_type=kv_type)
    per_token = model.card.kv_bytes_per_token[kv_type]
    for step in steps:
        assert step.kv_len == step.end
        assert step.kv_bytes == per_token * step.kv_len
        assert sum(t.kv_bytes for t in step.layers if t.mixer == "full") == step.kv_bytes
    assert session.cache.nbytes() == per_token * (len(PROMPT) + 5)


@pytest.mark.parametrize("model", MODELS)
def test_bytes_read_per_decoded_token_are_the_cards(model: Model):
    _, steps = _greedy_run(model, None, kv_type="f16")
    decode = [s for s in steps if s.phase == "decode"]
    assert decode
    k = model.config.n_experts_used
    for step in decode:
        assert all(len(t.woken) == k for t in step.layers if t.ffn == "moe")
        weights = {g: b for g, b in step.bytes_read.items() if g not in ("kv_cache", "state", "total")}
        assert weights == model.card.bytes_per_token_by_group
        assert sum(weights.values()) == model.card.bytes_per_token
        # attention read every cached position of every layer, at the cache's type
        assert step.bytes_read["kv_cache"] == model.card.kv_bytes_per_token["f16"] * step.end
        # linear-attention layers (hybrid models) read their fixed state once, whatever the length
        assert step.bytes_read.get("state", 0) == (model.card.state_bytes or 0)
        assert step.bytes_read["total"] == sum(step.bytes_read[g] for g in step.bytes_read if g != "total")


@pytest.mark.parametrize("model", MOE)
def test_prefill_reads_only_the_experts_it_woke(model: Model):
    session = Session(model)
    (step,) = session.prefill(PROMPT)
    per_expert = sum(
        model.weights.expert_nbytes(f"blk.0.ffn_{w}_exps.weight") for w in ("gate", "up", "down")
    )
    woken = sum(len(t.woken) for t in step.layers if t.ffn == "moe")
    assert step.bytes_read["experts"] == woken * per_expert
    first = step.layers[0]
    assert first.experts.shape == (len(PROMPT), model.config.n_experts_used)
    assert np.all(np.diff(first.expert_weights, axis=1) <= 0)  # best expert first


def test_decode_stops_at_an_end_of_turn_token():
    model = MODELS[0].values[0]
    end = min(model.config.end_ids)
    session = Session(model)
    list(session.prefill(PROMPT, sampler=Sampler.greedy()))

    class EndsOnThirdToken(Sampler):
        calls = 0

        def sample(self, logits):
            self.calls += 1
            forced = logits.copy()
            if self.calls == 3:
                forced[end] = logits.max() + 10.0
            return sample_stages(forced, self.settings, 0.0)

    steps = list(session.decode(EndsOnThirdToken(SamplerSettings(temperature=0.0)), 50))
    assert len(steps) == 3
    assert steps[-1].chosen == end and steps[-1].stopped
    assert not any(s.stopped for s in steps[:-1])


def test_end_ids_come_from_the_tokenizer_metadata():
    model = MODELS[0].values[0]
    f = model.file
    tokens = f.get("tokenizer.ggml.tokens")
    expected = {f.get("tokenizer.ggml.eos_token_id")} | {tokens.index(t) for t in ("<|im_end|>", "<|endoftext|>") if t in tokens}
    assert model.config.end_ids == expected


def test_steps_generates_n_tokens_in_n_minus_one_decode_passes():
    model = MODELS[0].values[0]
    session, steps = _greedy_run(model, 6, n_new=5)
    assert [s.phase for s in steps].count("decode") == 4
    chosen = [s.chosen for s in steps if s.chosen is not None]
    assert len(chosen) == 5
    decode = [s for s in steps if s.phase == "decode"]
    assert [s.input_ids[0] for s in decode] == chosen[:-1]  # each pass feeds the previous choice
    assert session.tokens == PROMPT + chosen[:-1]


def test_attention_weights_are_recorded_on_request():
    model = MODELS[0].values[0]
    session = Session(model, record_attention=True)
    (step,) = session.prefill(PROMPT)
    for t in step.layers:
        assert t.attention.shape == (model.config.n_head, len(PROMPT))
        assert np.allclose(t.attention.sum(axis=1), 1.0, atol=1e-5)
    assert Session(model).feed(PROMPT, phase="prefill").layers[0].attention is None


def test_quantized_kv_cache_stays_close_to_f32():
    model = MODELS[0].values[0]
    ref = Session(model, kv_type="f32").feed(PROMPT, phase="prefill").logits
    for kv_type, tol in (("f16", 1e-2), ("q8_0", 0.1)):
        got = Session(model, kv_type=kv_type).feed(PROMPT, phase="prefill").logits
        assert 0 < np.abs(got - ref).max() < tol


def test_token_ids_outside_the_vocabulary_are_refused():
    model = MODELS[0].values[0]
    with pytest.raises(WalkthroughError, match="outside this model's vocabulary"):
        Session(model).feed([model.config.n_vocab], phase="prefill")


def test_generate_is_prefill_then_decode_and_marks_the_cap():
    model = MODELS[0].values[0]
    _, separate = _greedy_run(model, 4, n_new=5)
    steps = list(Session(model, kv_type="f32").generate(PROMPT, Sampler.greedy(), 5, chunk=4))
    picked = [s.chosen for s in steps if s.chosen is not None]
    if model.config.end_ids & set(picked[:-1]):
        pytest.skip("this model ends its turn early")  # then the stop rule, not the cap, ends the run
    assert picked == [s.chosen for s in separate if s.chosen is not None]
    assert [s.positions for s in steps] == [s.positions for s in separate]
    assert len(picked) == 5 and [s.phase for s in steps].count("decode") == 4  # the cap counts picked tokens
    assert [s.capped for s in steps] == [False] * (len(steps) - 1) + [not steps[-1].stopped]
    one = list(Session(model).generate(PROMPT, Sampler.greedy(), 1))
    assert [s.phase for s in one] == ["prefill"] and one[-1].capped != one[-1].stopped
    with pytest.raises(WalkthroughError, match="at least 1 token"):
        next(Session(model).generate(PROMPT, Sampler.greedy(), 0))


def test_progress_reports_every_layer_and_cancel_abandons_the_pass():
    from walkthrough.engine.glassbox.session import Cancelled

    model = MODELS[0].values[0]
    n_layers = model.config.n_layers
    seen: list[tuple[int, int]] = []
    Session(model).feed(PROMPT, phase="prefill", progress=lambda done, total: seen.append((done, total)))
    assert seen == [(done, n_layers) for done in range(n_layers + 1)]

    def stop_after_first_layer(done: int, total: int) -> None:
        if done == 1:
            raise Cancelled()

    session = Session(model)
    with pytest.raises(Cancelled):
        session.feed(PROMPT, phase="prefill", progress=stop_after_first_layer)
    assert session.position == 0 and session.steps_run == 0  # nothing of the pass was counted

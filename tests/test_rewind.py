"""Rewinding a session: a reused prefix gives the logits of a full recomputation (dense, MoE, hybrid).

The reference is always our own engine run from scratch on the same tokens: once with the same pass
boundaries (the cached rows are then the very rows a fresh run computes, so logits must be equal bit for
bit), once in a single pass with plain float products (equal up to float summation order, as in
test_session's chunk-size test).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES_DIR

from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler
from walkthrough.errors import WalkthroughError

PROMPT = [236, 105, 56, 190, 230, 74, 97, 21, 254, 256, 184, 149, 150]  # any ids below the 268-token vocabulary
FOLLOW_UP = [12, 99, 201, 7, 64]
FILES = {"dense": "ref-llama-q4_0", "moe": "ref-qwen3moe-q8_0", "hybrid": "ref-qwen35moe-f32"}


@pytest.fixture(scope="module", params=list(FILES), ids=list(FILES))
def model(request) -> Model:
    return Model.open(FIXTURES_DIR / "reference" / f"{FILES[request.param]}.gguf")


def _replay(model: Model, passes: list[list[int]]) -> np.ndarray:
    """Logits of the last pass of a fresh session fed exactly these passes."""
    session = Session(model, kv_type="f32")
    for ids in passes:
        step = session.feed(ids, phase="prefill", all_logits=True)
    return step.all_logits


def _one_pass(model: Model, ids: list[int]) -> np.ndarray:
    plain = Model(model.file, card=model.card, match_llama_cpp=False)
    return Session(plain, kv_type="f32").feed(ids, phase="prefill", all_logits=True).all_logits


def _first_turn(model: Model, **kwargs) -> tuple[Session, list]:
    session = Session(model, kv_type="f32", **kwargs)
    steps = list(session.request(PROMPT, sampler=Sampler.greedy(), marks=[5]))
    steps += list(session.decode(Sampler.greedy(), 4, stop_ids=()))
    return session, steps


def test_a_follow_up_reuses_everything_held_and_matches_a_recomputation(model: Model):
    session, first = _first_turn(model)
    held = list(session.tokens)
    new = held + FOLLOW_UP
    steps = list(session.request(new, all_logits=True))
    reuse = steps[0].reuse
    assert (reuse.stop, reuse.reused, reuse.common, reuse.computed) == ("held", len(held), len(held), len(FOLLOW_UP))
    assert steps[0].reused == len(held) and all(s.reused == 0 for s in steps[1:])
    got = np.concatenate([s.all_logits for s in steps])  # [len(FOLLOW_UP), n_vocab]
    same_passes = [s.input_ids for s in first] + [s.input_ids for s in steps]
    assert np.array_equal(got[-1], _replay(model, same_passes)[-1])
    plain = Model(model.file, card=model.card, match_llama_cpp=False)
    ours = Session(plain, kv_type="f32")
    for s in first:
        ours.feed(s.input_ids, phase="prefill")
    tail = np.concatenate([s.all_logits for s in ours.request(new, all_logits=True)])
    assert np.allclose(tail, _one_pass(model, new)[len(held):], atol=1e-5)


def test_an_edit_reuses_up_to_the_first_changed_token(model: Model):
    session, first = _first_turn(model)
    held = list(session.tokens)
    edited = PROMPT[:8] + [3, 4, 5, 6]
    steps = list(session.request(edited, all_logits=True))
    reuse = steps[0].reuse
    assert (reuse.differs_at, reuse.held_id, reuse.new_id) == (8, held[8], 3)
    assert reuse.common == 8
    if session.recurrent:  # checkpoints at the mark (5) and the end offset (9): the nearest at or before 8 is 5
        assert (reuse.stop, reuse.reused, reuse.checkpoint) == ("checkpoint", 5, 5)
    else:
        assert (reuse.stop, reuse.reused, reuse.checkpoint) == ("differs", 8, None)
    assert session.tokens == edited and session.position == len(edited)
    plain = Model(model.file, card=model.card, match_llama_cpp=False)
    ours = Session(plain, kv_type="f32")
    for s in first:
        ours.feed(s.input_ids, phase="prefill")
    again = list(ours.request(edited, all_logits=True))  # fed without checkpoints: a hybrid one starts over
    tail = np.concatenate([s.all_logits for s in again])
    assert np.allclose(tail, _one_pass(model, edited)[again[0].reused :], atol=1e-5)
    kept = [edited[: reuse.reused]]  # the reused rows, as one pass of a fresh session
    assert np.array_equal(steps[-1].all_logits[-1], _replay(model, kept + [s.input_ids for s in steps])[-1])


def test_the_same_prompt_again_recomputes_only_its_last_token(model: Model):
    session = Session(model, kv_type="f32")
    first = list(session.request(PROMPT, sampler=Sampler.greedy()))
    again = list(session.request(PROMPT, sampler=Sampler.greedy()))
    reuse = again[0].reuse
    if session.recurrent:  # a checkpoint END_OFFSET tokens before the end
        assert (reuse.stop, reuse.reused) == ("checkpoint", len(PROMPT) - 4)
    else:
        assert (reuse.stop, reuse.reused, reuse.computed) == ("last", len(PROMPT) - 1, 1)
    assert np.array_equal(again[-1].logits, first[-1].logits)
    assert again[-1].chosen == first[-1].chosen


def test_rewind_to_a_checkpoint_restores_state_and_logits(model: Model):
    session = Session(model, kv_type="f32")
    session.feed(PROMPT, phase="prefill")
    saved = session.checkpoint()
    a = session.feed(FOLLOW_UP, phase="prefill").logits
    states = {i: {k: v.copy() for k, v in st.items()} for i, st in session.cache.states.items()}
    assert session.rewind(saved.position) == len(PROMPT)
    assert session.tokens == PROMPT
    if session.recurrent:
        assert np.array_equal(session.last_logits, saved.logits)
        assert session.checkpoints.nbytes > 0
    b = session.feed(FOLLOW_UP, phase="prefill").logits
    assert np.array_equal(a, b)
    for i, st in session.cache.states.items():
        for k, v in st.items():
            assert np.array_equal(v, states[i][k])


def test_a_hybrid_session_without_a_checkpoint_starts_over():
    model = Model.open(FIXTURES_DIR / "reference" / f"{FILES['hybrid']}.gguf")
    session = Session(model, kv_type="f32", checkpoint_every=0)
    session.feed(PROMPT, phase="prefill")
    assert session.rewind(6) == 0 and session.tokens == [] and session.position == 0
    assert all(not a.any() for st in session.cache.states.values() for a in st.values())
    reuse = Session(model).reuse_prefix(PROMPT)
    assert (reuse.stop, reuse.reused) == ("empty", 0)
    cache = KVCache(model.config)
    cache.length = 5
    with pytest.raises(WalkthroughError, match="checkpoint"):
        cache.truncate(3)


def test_checkpoint_memory_is_the_cards_state_bytes_per_checkpoint():
    model = Model.open(FIXTURES_DIR / "reference" / f"{FILES['hybrid']}.gguf")
    session, _ = _first_turn(model, checkpoint_every=8)
    per = sum(layer.state_bytes for layer in model.card.layers)
    # request: mark 5, end - 4 = 9, every 8, end 13; decode: 16 lies past the 4 tokens decoded (13..17) -> 16
    assert session.checkpoints.positions == [5, 8, 9, 13, 16]
    assert session.checkpoints.nbytes == per * 5


def test_restore_goes_back_to_a_checkpoint_of_ones_own(model: Model):
    # A speculative draft: save, feed three draft tokens in one pass, go back, feed the accepted one.
    session = Session(model, kv_type="f32")
    list(session.request(PROMPT))
    kept = list(session.checkpoints.positions)
    draft = session.checkpoint(keep=False)
    assert session.checkpoints.positions == kept  # not added to the session's own
    session.feed(FOLLOW_UP[:3], phase="decode")
    session.restore(draft)
    assert session.position == len(PROMPT) and session.tokens == PROMPT
    assert np.array_equal(session.last_logits, draft.logits)
    after = session.feed(FOLLOW_UP[:1], phase="decode").logits
    fresh = Session(model, kv_type="f32")
    list(fresh.request(PROMPT))
    assert np.array_equal(after, fresh.feed(FOLLOW_UP[:1], phase="decode").logits)


def test_recover_after_an_abandoned_pass(model: Model):
    # A pass stopped midway (the app's cancel hook) leaves linear layers half-updated: recover goes back to a
    # checkpoint; attention layers had nothing to undo. Then the session runs on as a fresh one would.
    session = Session(model, kv_type="f32")
    list(session.request(PROMPT))

    # The pass's layers ran (states changed, KV rows written past the position), but the session never
    # recorded it: as when the progress hook stops a pass after its last layer.
    model.forward(np.asarray(FOLLOW_UP), session.position, session.cache, model.meter())
    at = session.recover()
    assert at == (len(PROMPT) if not session.recurrent else session.checkpoints.positions[-1]) == session.position
    tail = list(session.request(PROMPT + FOLLOW_UP, all_logits=True))
    fresh = Session(model, kv_type="f32")
    list(fresh.request(PROMPT))
    want = fresh.feed(FOLLOW_UP, phase="prefill", all_logits=True).all_logits
    assert np.allclose(np.concatenate([s.all_logits for s in tail])[-len(FOLLOW_UP):], want, atol=1e-5)

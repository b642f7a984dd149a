"""The engine's exact products against llama.cpp, bit for bit, on every reference file of every architecture.

Each GGUF under tests/fixtures/arch and ../shared/fixtures/reference (random weights; F32, F16, Q8_0, Q4_0 and
MXFP4 matrices; llama, qwen2/3, MoE routers with softmax, sigmoid and top-k softmax gating, shared experts,
gpt-oss's sinks and YaRN, gemma3/4, phi3, mistral3, smollm3, lfm2's short convolutions, qwen35's Gated
DeltaNet) runs in llama.cpp at test time (one thread, F32 KV cache, no flash attention) and in the engine
with `exact_products`: every intermediate both show (`op_diff`), the logits of a 24-token prefill and of
two decode passes after it must be identical. docs/op-diff.md tells what each needed.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES_DIR, REPO_ROOT
from llama_support import both_engines, needs_llama
from real_weights_support import request_ids

from walkthrough.engine import op_diff
from walkthrough.inspect.gguf import open_gguf

FILES = sorted([*(REPO_ROOT / "tests" / "fixtures" / "arch").glob("*.gguf"),
                *(FIXTURES_DIR / "reference").glob("*.gguf")])
PROMPT = 24


@needs_llama
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_exact_products_give_llama_cpps_numbers_bit_for_bit(path):
    f = open_gguf(path)
    ids = request_ids(f)[:PROMPT]
    assert len(ids) == PROMPT
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = both_engines(path, ids, 2)
    arch = str(f.get("general.architecture"))
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(PROMPT), arch)
        assert len(diffs) >= 2, f"layer {layer}: only {[d.label for d in diffs]} seen on both sides"
        first = op_diff.first_difference(diffs)
        assert first is None, f"layer {layer}: {first.describe()}"
    assert len(ours_logits) == len(theirs_logits) == 3
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


SINKS = [p for p in FILES if p.stem.startswith("ref-gpt-oss")]


@needs_llama
@pytest.mark.parametrize("n_tokens", [24, 70])  # flash attention's per-cell kernel, and its tiled one from 64
@pytest.mark.parametrize("path", SINKS, ids=[p.stem for p in SINKS])
def test_attention_sinks_under_flash_attention_give_llama_cpps_logits_bit_for_bit(path, n_tokens):
    """gpt-oss's sinks join flash attention's online softmax after the cells, in both of ggml's kernels."""
    f = open_gguf(path)
    ids = (request_ids(f) * 4)[:n_tokens]
    (_, ours_logits, _), (_, theirs_logits) = both_engines(path, ids, 2, kv_type="f16", flash=True)
    for a, b in zip(ours_logits, theirs_logits, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


def test_every_architecture_the_engine_runs_has_a_reference_file_here():
    from walkthrough.architectures.declarations import ARCHITECTURES

    covered = {str(open_gguf(p).get("general.architecture")) for p in FILES}
    assert len(ARCHITECTURES) >= 10
    assert sorted(set(ARCHITECTURES) - covered) == []  # a new declaration needs a reference file here too

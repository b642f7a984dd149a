"""gemma3 with 62 layers (its 27B) scales q by 1/sqrt(n_embd / n_head), not 1/sqrt(head size), as llama.cpp does.

llama.cpp infers the model size from the layer count (src/models/gemma3.cpp `load_arch_hparams`), so a
random-weight gemma3 of 62 narrow layers whose n_embd / n_head (32) is not its head size (16) takes the
27B's scale: the engine's exact products give llama.cpp's logits bit for bit, and 61 layers keep the usual
scale.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_support import both_engines, needs_llama, write_gemma3

from walkthrough.engine.glassbox.model import Model
from walkthrough.inspect.gguf import open_gguf


@pytest.mark.parametrize(("n_layers", "width"), [(62, 32), (61, 16)])
def test_the_scale_follows_the_layer_count(tmp_path, n_layers, width):
    config = Model(open_gguf(write_gemma3(tmp_path / "g.gguf", n_layers))).config
    assert config.attention_scale(0) == float(np.float32(1) / np.sqrt(np.float32(width)))


@needs_llama
def test_a_62_layer_gemma3_gives_llama_cpps_logits_bit_for_bit(tmp_path):
    path = write_gemma3(tmp_path / "g.gguf", 62)
    ids = list(range(1, 21))
    (_, ours, _), (_, theirs) = both_engines(path, ids, 2)
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"

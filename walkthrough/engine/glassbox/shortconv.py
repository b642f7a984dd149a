"""LFM2's short convolution, the "linear" layers of lfm2 models: a gated causal convolution with a fixed state.

The layer keeps no KV cache, only the last L - 1 gated inputs of its convolution (`shortconv.l_cache` = L)
in the session's cache object (`KVCache.states[layer]["conv"]`, [L - 1, d], float32, as llama.cpp keeps it;
the card's `state_bytes`).
Following llama.cpp (vendored 0.3.36, `build_shortconv_block` in src/models/lfm2.cpp):

    b | c | x = x Win                      one projection, three [n, d] chunks
    y = c * conv(b * x)                    depthwise causal convolution over the last L gated inputs
    out = y Wout

No activation anywhere: the gates b and c are plain products. Shapes: n tokens, d model width, L kernel.
"""

from __future__ import annotations

import numpy as np

from walkthrough.engine.glassbox.config import Config, UnsupportedArchitecture
from walkthrough.engine.glassbox.deltanet import causal_conv
from walkthrough.engine.glassbox.layers import PassInput
from walkthrough.engine.steps import LayerTrace
from walkthrough.inspect.card import ModelCard
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.hparams import Hparams


def kernel(f: GGUFFile, card: ModelCard) -> int:
    """The convolution's kernel L (`shortconv.l_cache`), the kind's own hyperparameter
    (`Config.params["shortconv"]`).

    Raises:
        UnsupportedArchitecture: it is not a count of 2 or more.
    """
    hp = Hparams(f, card.architecture)
    l_cache = hp.int("shortconv.l_cache")
    if not l_cache or l_cache < 2:
        raise UnsupportedArchitecture(f"{hp.arch}.shortconv.l_cache is {hp.raw('shortconv.l_cache')!r}, "
                                      "not a kernel of 2 or more; the engine cannot run it (inspect still "
                                      "works)")
    return l_cache


def layer_shapes(config: Config, layer: int) -> dict[str, tuple[int, ...]]:
    """Tensors of one short-convolution layer (name after `blk.N.`) and their ggml shapes (ne0 first)."""
    n_embd, l_cache = config.n_embd, config.params["shortconv"]
    return {
        "shortconv.conv.weight": (l_cache, n_embd),
        "shortconv.in_proj.weight": (n_embd, 3 * n_embd),
        "shortconv.out_proj.weight": (n_embd, n_embd),
    }


# llama.cpp's graph names for the layer's steps (src/models/lfm2.cpp), shown to the op-by-op differ
IN_PROJ, CONV, OUT_PROJ = (f"model.layers.{{}}.conv.{step}" for step in ("in_proj", "conv", "out_proj"))


def short_conv(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: one gated short convolution, reading and advancing the layer's fixed state."""
    m, n, pre = p.meter, x.shape[0], f"blk.{layer}."
    state = p.cache.states[layer]
    bcx = m.look(IN_PROJ, layer, m.linear(pre + "shortconv.in_proj.weight", x))  # [n, 3d]
    b, c, v = np.split(bcx, 3, axis=-1)  # [n, d] each
    w = m.tensor(pre + "shortconv.conv.weight")  # [d, L]
    conv, state["conv"] = causal_conv(b * v, state["conv"], w)  # [n, d]
    m.look(CONV, layer, conv)
    nbytes = p.cache.state_bytes_by_layer[layer]
    m.read_state(nbytes, n * 2 * w.size)
    trace.state_bytes = nbytes
    return m.look(OUT_PROJ, layer, m.linear(pre + "shortconv.out_proj.weight", c * conv))


def new_state(config: Config, layer: int) -> dict[str, np.ndarray]:
    """A zero state for one short-convolution layer: its last L - 1 gated inputs, "conv" [L - 1, d]."""
    return {"conv": np.zeros((config.params["shortconv"] - 1, config.n_embd), np.float32)}

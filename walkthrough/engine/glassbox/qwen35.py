"""What the hybrid qwen35moe layers need beyond the model card: Gated DeltaNet sizes and rotary sections.

A qwen35moe file (Qwen3.5 / Qwen3.6 MoE) mixes two kinds of layer: Gated
DeltaNet ("linear" attention, a fixed-size state) and gated full attention
(a KV cache), in the pattern the card reads from `full_attention_interval` or
`attention.recurrent_layers`. This module turns the file's `{arch}.ssm.*` and
`{arch}.rope.dimension_sections` keys into the sizes the forward pass uses.

Sizes follow llama.cpp (vendored 0.3.36, `src/models/qwen35moe.cpp`,
`build_layer_attn_linear`):
- key heads = `ssm.group_count`, value heads = `ssm.time_step_rank`;
- key head size = `ssm.state_size`, value head size = `ssm.inner_size` / value heads;
- the convolution runs over q | k | v together: 2 x key heads x key size + inner size channels,
  over the last `ssm.conv_kernel` inputs, so its state keeps the previous kernel - 1 inputs;
- the recurrent state is one [value size, key size] matrix per value head.
Both states are float32, as llama.cpp keeps them, so a layer's state is
4 x ((kernel - 1) x channels + value heads x value size x key size) bytes: the
card's `layers[i].state_bytes`.

Rotary sections: qwen35moe uses llama.cpp's interleaved multi-section rope
(`LLAMA_ROPE_TYPE_IMROPE`, `ggml_mrope_cache_init` in ggml-cpu/ops.cpp). Rotary
pair i falls in sector i mod sum(sections); sectors 0, 3, 6, ... below
3 x sections[0] turn with the time position, 1, 4, 7, ... below 3 x sections[1]
with the height position, 2, 5, 8, ... below 3 x sections[2] with the width
position, any other with the fourth position. For text, llama.cpp gives the
first three the token position and the fourth 0 (`llm_graph_input_pos::set_input`
in src/llama-graph.cpp), so a pair either turns as plain NEOX rope or not at
all. `text_rope_pairs` says which; with the published sections (and the
reference fixture's [3, 3, 2, 0]) every pair turns: plain NEOX partial rotary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import RECURRENT_STATE_BYTES_PER_VALUE, ModelCard
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.hparams import Hparams, as_count


class HybridMetadataError(WalkthroughError):
    """The file's Gated DeltaNet metadata is missing or inconsistent; the engine cannot run it."""


@dataclass(frozen=True)
class HybridDims:
    """Sizes of a Gated DeltaNet layer, and the rotary pairs text positions turn in full-attention layers."""

    conv_kernel: int  # K: inputs the causal convolution sees (this one and the K - 1 before)
    n_k_heads: int  # query/key heads (`ssm.group_count`)
    n_v_heads: int  # value heads (`ssm.time_step_rank`); value head h reads key head h mod n_k_heads
    head_k: int  # query/key head size (`ssm.state_size`)
    head_v: int  # value head size (`ssm.inner_size` / n_v_heads)
    rope_sections: tuple[int, ...]  # `rope.dimension_sections` (t, h, w, e), zeros when absent

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.head_k

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.head_v

    @property
    def conv_channels(self) -> int:
        """Channels of `attn_qkv` and of the convolution: q | k | v."""
        return 2 * self.key_dim + self.value_dim

    def new_state(self) -> dict[str, np.ndarray]:
        """A zero state for one layer: "conv" [K - 1, channels], "recurrent" [n_v_heads, head_v, head_k]."""
        return {
            "conv": np.zeros((self.conv_kernel - 1, self.conv_channels), np.float32),
            "recurrent": np.zeros((self.n_v_heads, self.head_v, self.head_k), np.float32),
        }

    @property
    def state_bytes(self) -> int:
        """Bytes of one layer's state (float32), the card's `layers[i].state_bytes`."""
        values = (self.conv_kernel - 1) * self.conv_channels + self.n_v_heads * self.head_v * self.head_k
        return values * RECURRENT_STATE_BYTES_PER_VALUE

    def tensor_shapes(self, n_embd: int) -> dict[str, tuple[int, ...]]:
        """Tensors of one linear-attention layer (name after `blk.N.`) and their ggml shapes (ne0 first)."""
        h = self.n_v_heads
        return {
            "attn_qkv.weight": (n_embd, self.conv_channels),
            "attn_gate.weight": (n_embd, self.value_dim),
            "ssm_conv1d.weight": (self.conv_kernel, self.conv_channels),
            "ssm_dt.bias": (h,),
            "ssm_a": (h,),
            "ssm_beta.weight": (n_embd, h),
            "ssm_alpha.weight": (n_embd, h),
            "ssm_norm.weight": (self.head_v,),
            "ssm_out.weight": (self.value_dim, n_embd),
        }


def text_rope_pairs(sections: tuple[int, ...], n_pairs: int) -> np.ndarray:
    """[n_pairs] bool: which rotary pairs a text position turns under interleaved multi-section rope.

    Example: sections (3, 3, 2, 0) over 8 pairs -> all True (plain NEOX); (1, 1, 1, 1) over
    4 pairs -> [True, True, True, False] (the fourth pair takes the fourth position, 0: no turn).
    Sections all zero (no key): every pair turns.
    """
    s = (list(sections) + [0, 0, 0, 0])[:4]
    total = sum(s)
    if total <= 0:
        return np.ones(n_pairs, bool)
    sector = np.arange(n_pairs) % total
    return (
        ((sector % 3 == 0) & (sector < 3 * s[0]))
        | ((sector % 3 == 1) & (sector < 3 * s[1]))
        | ((sector % 3 == 2) & (sector < 3 * s[2]))
    )


def _sections(hp: Hparams) -> tuple[int, ...]:
    raw = hp.raw("rope.dimension_sections")
    if raw is None:
        return (0, 0, 0, 0)
    values = [as_count(v) for v in (raw if isinstance(raw, (list, tuple, np.ndarray)) else [raw])][:4]
    if None in values:
        raise HybridMetadataError(f"{hp.arch}.rope.dimension_sections = {raw!r} is not a list of counts")
    return tuple(values)


def rope_sections(f: GGUFFile, card: ModelCard) -> tuple[int, ...]:
    """The rope sections a gated full-attention layer turns text positions by (`rope.dimension_sections`;
    zeros when absent): the "gated_full" kind's own hyperparameter.

    Raises:
        HybridMetadataError: the key is not a list of counts.
    """
    return _sections(Hparams(f, card.architecture))


def hybrid_dims(f: GGUFFile, card: ModelCard) -> HybridDims:
    """The Gated DeltaNet sizes of a hybrid file, checked for consistency.

    Raises:
        HybridMetadataError: a key is missing, or the sizes cannot fit together.
    """
    hp = Hparams(f, card.architecture)
    keys = ("ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count")
    values = {k: hp.int(k) for k in keys}
    missing = [f"{card.architecture}.{k}" for k, v in values.items() if not v]
    if missing:
        raise HybridMetadataError(
            f"{f.path.name} lacks {', '.join(missing)} (Gated DeltaNet sizes); the engine cannot run it "
            "(inspect still works)"
        )
    d_conv, d_inner, d_state, n_v, n_k = (values[k] for k in keys)
    if d_inner % n_v or n_v % n_k:
        raise HybridMetadataError(
            f"{f.path.name}: inner size {d_inner} over {n_v} value heads reading {n_k} key heads does not divide "
            "evenly; the engine cannot run it"
        )
    return HybridDims(d_conv, n_k, n_v, d_state, d_inner // n_v, _sections(hp))

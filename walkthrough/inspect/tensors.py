"""Reading llama.cpp tensor names: which group a tensor belongs to and which layer it is in.

Groups are what the card sums bytes and parameters over (the quant mix per
group, bytes read per token per group). Names follow llama.cpp's
`src/llama-arch.cpp` tensor table: `token_embd.weight`, `blk.N.attn_q.weight`,
`blk.N.ffn_up_exps.weight`, `blk.N.ssm_conv1d.weight`, ...

Example: tensor_group("blk.3.ffn_up_exps.weight") -> "experts", tensor_layer("blk.3.ffn_up_exps.weight") -> 3.
"""

from __future__ import annotations

import re

from walkthrough.inspect.gguf import TensorInfo

# Tensor groups, in display order.
GROUPS = (
    "embedding",
    "attention",
    "linear_attention",
    "norm",
    "router",
    "experts",
    "shared_expert",
    "ffn",
    "output",
    "other",
)
# Lookup tables: decoding one token reads one row of each.
_LOOKUPS = ("token_embd", "per_layer_token_embd", "position_embd", "token_types")
# Prefixes of the recurrent (linear-attention) mixers: Mamba/Gated DeltaNet, RWKV, short convolutions.
RECURRENT_PREFIXES = ("ssm_", "time_mix_", "shortconv")

_LAYER_NAME = re.compile(r"^blk\.(\d+)\.(.+)$")


def tensor_group(name: str) -> str:
    """The group a tensor belongs to, from its llama.cpp name.

    Example: `blk.3.ffn_up_exps.weight` -> "experts", `blk.0.ssm_a` -> "linear_attention".
    """
    return tensor_place(name)[1]


def tensor_place(name: str) -> tuple[int | None, str]:
    """(layer, group) of a tensor: `tensor_layer` and `tensor_group` from one reading of the name.

    Example: `blk.3.ffn_up_exps.weight` -> (3, "experts"), `output_norm.weight` -> (None, "norm").
    """
    m = _LAYER_NAME.match(name)
    if m is None:
        stem = name.rsplit(".", 1)[0]
        if stem in _LOOKUPS:
            return None, "embedding"
        if "norm" in stem:
            return None, "norm"
        if stem == "output":
            return None, "output"
        return None, "other"
    return int(m.group(1)), _layer_group(m.group(2))


def _layer_group(part: str) -> str:
    """The group of a `blk.N.` tensor from the part of its name after `blk.N.`."""
    if part.startswith(("ffn_gate_inp", "exp_probs_b")):
        return "router"
    if "norm" in part:
        return "norm"
    if "_exps" in part:
        return "experts"
    if "_shexp" in part:
        return "shared_expert"
    if part.startswith(RECURRENT_PREFIXES):
        return "linear_attention"
    if part.startswith("attn_"):
        return "attention"
    if part.startswith(("ffn_", "channel_mix")):
        return "ffn"
    return "other"


def tensor_layer(name: str) -> int | None:
    """Layer index of a `blk.N.*` tensor, None for the others."""
    m = _LAYER_NAME.match(name)
    return int(m.group(1)) if m else None


def layer_parts(tensors: dict[str, TensorInfo], n_layers: int) -> list[dict[str, TensorInfo]]:
    """For each layer below n_layers, its tensors keyed by the name after `blk.N.` (e.g. "attn_k.weight")."""
    parts: list[dict[str, TensorInfo]] = [{} for _ in range(n_layers)]
    for name, t in tensors.items():
        m = _LAYER_NAME.match(name)
        if m and int(m.group(1)) < n_layers:
            parts[int(m.group(1))][m.group(2)] = t
    return parts


def embedding_rows(t: TensorInfo) -> int:
    """Rows of a lookup table (ggml shape [row length, rows]): 0 for an empty one."""
    return t.n_elements // t.shape[0] if t.shape and t.shape[0] else 0

"""Gated full attention, the KV-cache layers of hybrid qwen35moe models.

Like the plain full attention of `layers.full_attention`, with two changes
(llama.cpp vendored 0.3.36, `build_layer_attn` in src/models/qwen35moe.cpp):
- the query projection also produces an output gate: for each head, `head_dim`
  query values then `head_dim` gate values (`[q_0, g_0, q_1, g_1, ...]`);
- the attention output is multiplied by sigmoid(gate) before the output projection.
q and k are RMS-normalised per head; rotary embedding turns only the first
`rope.dimension_count` dims of each head, NEOX pairing, and, under the
multi-section rope, only the pairs a text position turns
(`qwen35.text_rope_pairs`; all of them for the published section sizes).
"""

from __future__ import annotations

import numpy as np

from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.layers import PassInput, attend, project_qkv
from walkthrough.engine.glassbox.qwen35 import text_rope_pairs
from walkthrough.engine.steps import LayerTrace


def gated_full_attention(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: joint query+gate projection, q/k RMSNorm, partial rope, attention, sigmoid gate."""
    c, m, n, pre = p.config, p.meter, x.shape[0], f"blk.{layer}."
    hd = c.head_k(layer)
    qg, k, v = project_qkv(p, pre, x, q_dim=2 * hd)  # [n, h, 2 hd], [n, h_kv, hd], [n, h_kv, hd_v]
    q, gate = qg[..., :hd], qg[..., hd:]  # [n, h, hd] each
    q = ops.rmsnorm(q, m.tensor(pre + "attn_q_norm.weight"), c.norm_eps)
    k = ops.rmsnorm(k, m.tensor(pre + "attn_k_norm.weight"), c.norm_eps)
    turns = text_rope_pairs(c.params["gated_full"], p.cos.shape[1])  # [n_rot/2]
    cos, sin = np.where(turns, p.cos, np.float32(1)), np.where(turns, p.sin, np.float32(0))  # [n, n_rot/2]
    q, k = ops.rope_qk(q, k, cos, sin, neox=True, exact=m.exact_elementwise)
    out = attend(p, layer, q, k, v, trace) * ops.sigmoid(gate, m.exact_products)  # [n, h, hd_v]
    o = out.reshape(n, -1)
    return m.linear(pre + "attn_output.weight", o, pre + "attn_output.bias")


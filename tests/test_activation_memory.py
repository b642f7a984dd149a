"""Activation bytes per layer, from the engine's own arrays, against the layer's shapes worked out by hand."""

from __future__ import annotations

from pathlib import Path

from walkthrough.costs.budget import compute_buffer_bytes
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "reference"


def _expected(c, n_ff: int, n: int, kv_len: int, last_only: bool) -> int:
    """float32 values a llama layer produces: norms, q/k/v, attention weights and output, o, FFN gate/up/down."""
    rows_ffn = 1 if last_only else n
    attention = n * (c.n_embd + c.n_head * c.head_dim_k + 2 * c.n_head_kv[0] * c.head_dim_k
                     + c.n_head * c.head_dim_v + c.n_embd) + c.n_head * n * kv_len
    ffn = rows_ffn * (c.n_embd + 2 * n_ff + c.n_embd)
    return 4 * (attention + ffn)


def test_activation_bytes_of_a_prefill_chunk_and_a_decode_pass():
    model = Model.open(REFERENCE / "ref-llama-f32.gguf")  # F32 weights: no rounded inputs
    c = model.config
    n_ff = model.file.tensors["blk.0.ffn_up.weight"].shape[1]  # a dense llama: its FFN width from the file
    session = Session(model)
    chunk = next(session.prefill([5, 6, 7, 8, 9]))
    last = c.n_layers - 1
    assert [t.activation_bytes for t in chunk.layers] == (
        [_expected(c, n_ff, 5, 5, False)] * last + [_expected(c, n_ff, 5, 5, True)])
    step = session.feed([10], phase="decode")
    assert [t.activation_bytes for t in step.layers] == [_expected(c, n_ff, 1, 6, False)] * c.n_layers
    # The cost model's compute buffer for the same tokens is a different count (logits, no attention weights):
    # a figure to read beside the measured one.
    assert compute_buffer_bytes(model.card, 5).value > 0
    assert step.to_json()["activation_bytes"] == [t.activation_bytes for t in step.layers]

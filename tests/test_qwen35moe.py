"""The hybrid qwen35moe architecture: layer kinds from metadata, the fixed state beside the KV cache, chunk invariance.

The reference fixture's logits are checked against llama.cpp's in
`test_engine_reference.py` (every `ref-*.gguf` is a case there; qwen35moe runs
now that the engine supports it). Here: the two kinds of layer as the config,
cache and step records show them, and other shapes of the same architecture
(written with `gguf.GGUFWriter` by `write_qwen35moe`: a different interval,
head counts, head sizes, a per-layer `recurrent_layers` array, Q8_0 weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from gguf import GGUFWriter, quants
from gguf.constants import GGMLQuantizationType as Q
from llama_support import add_tokenizer

from walkthrough.engine.glassbox import deltanet
from walkthrough.engine.glassbox.config import build_config
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.qwen35 import hybrid_dims, text_rope_pairs
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.glassbox.validate import IncompleteModel
from walkthrough.engine.sampler import Sampler
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf

FIXTURE = FIXTURES_DIR / "reference" / "ref-qwen35moe-f32.gguf"
PROMPT = [236, 105, 56, 190, 230, 74, 97, 21, 254, 256, 184, 149, 150, 12, 99]


@dataclass(frozen=True)
class Shape:
    """Sizes of a random qwen35moe model (defaults: the reference fixture's)."""

    n_layers: int = 4
    interval: int | None = 4  # full_attention_interval (None: not written)
    recurrent: tuple[bool, ...] | None = None  # attention.recurrent_layers (None: not written)
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    rope_dims: int = 16
    sections: tuple[int, ...] = (3, 3, 2, 0)
    conv: int = 4
    n_k: int = 2  # ssm.group_count
    n_v: int = 4  # ssm.time_step_rank
    head_k: int = 16  # ssm.state_size (llama.cpp needs head_v == head_k)
    n_experts: int = 8
    n_used: int = 2
    ff: int = 64
    mtp: int = 0  # multi-token-prediction blocks after the trunk (nextn_predict_layers)

    def is_recurrent(self, i: int) -> bool:
        if i >= self.n_layers:
            return False  # MTP blocks are full attention
        if self.recurrent is not None:
            return self.recurrent[i]
        return (i + 1) % (self.interval or 4) != 0  # llama.cpp's default interval is 4


def _tensors(shape: Shape, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights in numpy order ([n_out, n_in]), scaled like the reference fixture's."""
    s, d = shape, shape.n_embd

    def mat(n_out: int, n_in: int) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    vocab = 268
    out = {"token_embd.weight": rng.standard_normal((vocab, d)).astype(np.float32),
           "output_norm.weight": norm(d), "output.weight": mat(vocab, d)}
    key_dim, value_dim = s.n_k * s.head_k, s.n_v * s.head_k
    for i in range(s.n_layers + s.mtp):
        b = f"blk.{i}."
        out[b + "attn_norm.weight"], out[b + "post_attention_norm.weight"] = norm(d), norm(d)
        if s.is_recurrent(i):
            channels = 2 * key_dim + value_dim
            out |= {b + "attn_qkv.weight": mat(channels, d), b + "attn_gate.weight": mat(value_dim, d),
                    b + "ssm_conv1d.weight": (0.5 * rng.standard_normal((channels, s.conv))).astype(np.float32),
                    b + "ssm_dt.bias": (0.3 * rng.standard_normal(s.n_v)).astype(np.float32),
                    b + "ssm_a": (-np.exp(0.3 * rng.standard_normal(s.n_v))).astype(np.float32),
                    b + "ssm_beta.weight": mat(s.n_v, d), b + "ssm_alpha.weight": mat(s.n_v, d),
                    b + "ssm_norm.weight": norm(s.head_k), b + "ssm_out.weight": mat(d, value_dim)}
        else:
            out |= {b + "attn_q.weight": mat(2 * s.n_head * s.head_dim, d),
                    b + "attn_k.weight": mat(s.n_head_kv * s.head_dim, d),
                    b + "attn_v.weight": mat(s.n_head_kv * s.head_dim, d),
                    b + "attn_output.weight": mat(d, s.n_head * s.head_dim),
                    b + "attn_q_norm.weight": norm(s.head_dim), b + "attn_k_norm.weight": norm(s.head_dim)}
        out |= {b + "ffn_gate_inp.weight": rng.standard_normal((s.n_experts, d)).astype(np.float32),
                b + "ffn_gate_exps.weight": np.stack([mat(s.ff, d) for _ in range(s.n_experts)]),
                b + "ffn_up_exps.weight": np.stack([mat(s.ff, d) for _ in range(s.n_experts)]),
                b + "ffn_down_exps.weight": np.stack([mat(d, s.ff) for _ in range(s.n_experts)]),
                b + "ffn_gate_inp_shexp.weight": (0.3 * rng.standard_normal(d)).astype(np.float32),
                b + "ffn_gate_shexp.weight": mat(s.ff, d), b + "ffn_up_shexp.weight": mat(s.ff, d),
                b + "ffn_down_shexp.weight": mat(d, s.ff)}
        if i >= s.n_layers:
            out |= {b + "nextn.eh_proj.weight": mat(d, 2 * d), b + "nextn.enorm.weight": norm(d),
                    b + "nextn.hnorm.weight": norm(d)}
    return out


def write_qwen35moe(
    path: Path, shape: Shape, *, seed: int = 0, qtype: Q = Q.F32, tensors_of: Shape | None = None,
    omit: tuple[str, ...] = (),
) -> Path:
    """Write a random qwen35moe GGUF with the fixture's tokenizer; 2-D weights stored as `qtype`.

    Vectors and the convolution kernel stay F32, as llama.cpp's converter keeps them
    (ggml's `ssm_conv` needs an F32 kernel). `tensors_of` writes another shape's tensors
    under this shape's metadata (a file whose metadata and tensors disagree); `omit` leaves out
    metadata keys (without the `qwen35moe.` prefix) and tensors by name.
    """
    s, arch = shape, "qwen35moe"
    w = GGUFWriter(str(path), arch)
    w.add_name(f"random-{arch}")
    w.add_block_count(s.n_layers + s.mtp)
    if s.mtp:
        w.add_uint32(f"{arch}.nextn_predict_layers", s.mtp)
    w.add_context_length(256)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.rope_dims)
    w.add_rope_dimension_sections(list(s.sections))
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e7)
    w.add_expert_count(s.n_experts)
    w.add_expert_used_count(s.n_used)
    w.add_expert_feed_forward_length(s.ff)
    w.add_expert_shared_feed_forward_length(s.ff)
    if s.interval is not None:
        w.add_uint32(f"{arch}.full_attention_interval", s.interval)
    if s.recurrent is not None:
        w.add_array(f"{arch}.attention.recurrent_layers", [bool(r) for r in s.recurrent])
    w.add_ssm_conv_kernel(s.conv)
    w.add_ssm_inner_size(s.n_v * s.head_k)
    w.add_ssm_state_size(s.head_k)
    w.add_ssm_time_step_rank(s.n_v)
    w.add_ssm_group_count(s.n_k)
    w.add_file_type(0 if qtype == Q.F32 else int(qtype))
    with open_gguf(FIXTURE) as ref:
        add_tokenizer(w, ref, chat_template=False)
        w.add_add_bos_token(False)
    for key in omit:
        w.kv_data[0].pop(f"{arch}.{key}", None)
    for name, array in _tensors(tensors_of or s, np.random.default_rng(seed)).items():
        if name in omit:
            continue
        if qtype != Q.F32 and array.ndim >= 2 and "conv1d" not in name:
            w.add_tensor(name, quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _run(model: Model, chunk: int | None) -> tuple[Session, list, np.ndarray]:
    session = Session(model, kv_type="f32")
    steps = list(session.prefill(PROMPT, chunk=chunk, sampler=Sampler.greedy(), all_logits=True))
    prompt_logits = np.concatenate([s.all_logits for s in steps])
    steps += list(session.decode(Sampler.greedy(), 4, stop_ids=()))
    return session, steps, prompt_logits


def _assert_same_run(a: tuple, b: tuple) -> None:
    (sa, steps_a, logits_a), (sb, steps_b, logits_b) = a, b
    assert [s.chosen for s in steps_a if s.chosen is not None] == [s.chosen for s in steps_b if s.chosen is not None]
    # float32 rounding of matmuls over different batch sizes: ~1e-6 of the values' scale
    assert np.abs(logits_a - logits_b).max() <= 1e-5 * max(1.0, float(np.abs(logits_a).max()))
    assert np.abs(steps_a[-1].logits - steps_b[-1].logits).max() <= 1e-5 * max(1.0, float(np.abs(logits_a).max()))
    for layer, state in sa.cache.states.items():
        for name, array in state.items():
            other = sb.cache.states[layer][name]
            assert array.shape == other.shape
            assert np.abs(array - other).max() <= 1e-5 * max(1.0, float(np.abs(array).max()))
    for layer in sa.cache.layers:
        scale = max(1.0, float(np.abs(sa.cache.values(layer)).max()))
        assert np.abs(sa.cache.keys(layer) - sb.cache.keys(layer)).max() <= 1e-5 * scale
        assert np.abs(sa.cache.values(layer) - sb.cache.values(layer)).max() <= 1e-5 * scale


@pytest.fixture(scope="module")
def fixture_model() -> Model:
    return Model.open(FIXTURE)


# ---- layer kinds ---------------------------------------------------------------------------------

def test_fixture_runs_with_linear_and_full_layers(fixture_model: Model):
    c = fixture_model.config
    assert c.mixers == tuple(layer.attention for layer in fixture_model.card.layers)
    assert c.mixers == ("linear", "linear", "linear", "full")  # full_attention_interval 4
    assert [c.mixer_key(i) for i in range(4)] == ["linear", "linear", "linear", "gated_full"]
    assert c.spec.router.normalize  # build_moe_ffn(..., norm_w = true) in qwen35moe.cpp


@pytest.mark.parametrize(
    ("shape", "kinds"),
    [
        (Shape(n_layers=6, interval=2), ("linear", "full") * 3),
        (Shape(n_layers=5, interval=None), ("linear", "linear", "linear", "full", "linear")),  # llama.cpp's default 4
        (Shape(n_layers=4, interval=4, recurrent=(True, False, True, False)), ("linear", "full") * 2),  # array wins
        (Shape(n_layers=3, interval=None, recurrent=(False, True, True)), ("full", "linear", "linear")),
    ],
    ids=["interval-2", "default-interval", "array-over-interval", "array"],
)
def test_layer_kinds_follow_the_metadata(tmp_path, shape: Shape, kinds: tuple[str, ...]):
    model = Model.open(write_qwen35moe(tmp_path / "m.gguf", shape))
    assert model.config.mixers == kinds
    session = Session(model)
    assert session.cache.layer_kinds == kinds
    assert session.cache.layers == [i for i, k in enumerate(kinds) if k == "full"]
    assert sorted(session.cache.states) == [i for i, k in enumerate(kinds) if k == "linear"]
    (step,) = session.prefill(PROMPT[:5])
    assert [t.cache_record()["kind"] for t in step.layers] == list(kinds)


def test_tensors_that_disagree_with_the_layer_kinds_are_refused(tmp_path):
    # Metadata says every 2nd layer is full attention; the tensors are those of every 4th.
    path = write_qwen35moe(tmp_path / "m.gguf", Shape(n_layers=4, interval=2), tensors_of=Shape(n_layers=4, interval=4))
    f = open_gguf(path)
    assert build_config(f, build_card(f)).mixers == ("linear", "full", "linear", "full")
    # Layer 1 holds linear-attention tensors where the declaration's full attention needs q, k, v.
    with pytest.raises(IncompleteModel, match=r"no tensor blk\.1\.attn_q\.weight"):
        Model.open(path)


@pytest.mark.parametrize(
    ("omit", "message"),
    [
        (("ssm.state_size",), r"lacks qwen35moe\.ssm\.state_size"),
        (("blk.3.attn_q_norm.weight",), r"no tensor blk\.3\.attn_q_norm\.weight"),
        (("blk.0.ssm_a",), r"no tensor blk\.0\.ssm_a"),
    ],
)
def test_missing_pieces_are_one_line_errors(tmp_path, omit: tuple[str, ...], message: str):
    path = write_qwen35moe(tmp_path / "m.gguf", Shape(), omit=omit)
    with pytest.raises(WalkthroughError, match=message):
        Model.open(path)


# ---- the fixed state beside the KV cache ---------------------------------------------------------

def test_state_bytes_are_the_cards_and_never_grow(fixture_model: Model):
    card = fixture_model.card
    session, steps, _ = _run(fixture_model, 4)
    for i, layer in enumerate(card.layers):
        if layer.attention == "linear":
            assert session.cache.state_bytes_by_layer[i] == layer.state_bytes
            assert sum(a.nbytes for a in session.cache.states[i].values()) == layer.state_bytes
        else:
            assert i not in session.cache.states
    assert session.cache.state_bytes == card.state_bytes
    for step in steps:
        assert step.state_bytes == card.state_bytes
        records = [t.cache_record() for t in step.layers]
        for t, record in zip(step.layers, records):
            if t.mixer == "linear":
                assert record["state_bytes"] == card.layers[t.index].state_bytes and "kv_len" not in record
            else:  # KV rows grow with the positions, in full-attention layers only
                assert record["kv_len"] == step.end
                assert record["kv_bytes"] == session.cache.layer_bytes_per_token(t.index) * step.end
        assert step.to_json()["layers"] == records
        assert step.kv_bytes == 2 * card.kv_bytes_per_token["f16"] * step.end  # an F32 cache: twice F16's bytes


def test_state_shapes_follow_the_metadata(fixture_model: Model):
    f = fixture_model.file
    dims = hybrid_dims(f, fixture_model.card)
    n_v = f.get("qwen35moe.ssm.time_step_rank")
    head_v = f.get("qwen35moe.ssm.inner_size") // n_v
    head_k = f.get("qwen35moe.ssm.state_size")
    channels = 2 * f.get("qwen35moe.ssm.group_count") * head_k + n_v * head_v
    state = Session(fixture_model).cache.states[0]
    assert state["conv"].shape == (f.get("qwen35moe.ssm.conv_kernel") - 1, channels)
    assert state["recurrent"].shape == (n_v, head_v, head_k)
    assert dims.state_bytes == fixture_model.card.layers[0].state_bytes


def test_bytes_read_show_linear_attention_and_the_state(fixture_model: Model):
    _, steps, _ = _run(fixture_model, None)
    card = fixture_model.card
    for step in steps:
        assert step.bytes_read["linear_attention"] == card.bytes_per_token_by_group["linear_attention"]
        assert step.bytes_read["state"] == card.state_bytes
        # only the full-attention layers read cached rows
        assert step.bytes_read["kv_cache"] == sum(t.kv_bytes for t in step.layers if t.mixer == "full")


# ---- chunk invariance ----------------------------------------------------------------------------

def test_chunk_size_changes_nothing(fixture_model: Model):
    whole = _run(fixture_model, None)
    for chunk in (1, 2, 7):
        _assert_same_run(whole, _run(fixture_model, chunk))


def test_a_new_state_starts_from_zeros(fixture_model: Model):
    a = Session(fixture_model).feed(PROMPT, phase="prefill").logits
    b = Session(fixture_model).feed(PROMPT, phase="prefill").logits
    assert np.array_equal(a, b)


# ---- other shapes --------------------------------------------------------------------------------

OTHER_SHAPES = {
    "interval-2-wide-heads": Shape(n_layers=4, interval=2, n_head=8, n_head_kv=1, head_dim=16, rope_dims=8,
                                   sections=(2, 1, 1, 0), n_k=1, n_v=4, head_k=32),
    "array-equal-heads": Shape(n_layers=3, interval=None, recurrent=(True, True, False), n_k=4, n_v=4,
                               head_k=8, conv=3, n_experts=4, n_used=3),
    "q8_0": Shape(n_layers=4, interval=4),
}


@pytest.mark.parametrize("name", OTHER_SHAPES)
def test_other_shapes_run_and_stay_chunk_invariant(tmp_path, name: str):
    shape = OTHER_SHAPES[name]
    # Plain float products: llama.cpp's 8-bit rounding of a Q8_0 product's input depends on the batch,
    # so only the float path is exactly chunk-invariant (as in test_session.py).
    model = Model.open(write_qwen35moe(tmp_path / f"{name}.gguf", shape, seed=3,
                                       qtype=Q.Q8_0 if name == "q8_0" else Q.F32), match_llama_cpp=False)
    whole = _run(model, None)
    assert np.isfinite(whole[2]).all()
    _assert_same_run(whole, _run(model, 3))
    for i, layer in enumerate(model.card.layers):
        if layer.attention == "linear":
            assert whole[0].cache.state_bytes_by_layer[i] == layer.state_bytes


def test_a_multi_token_prediction_block_is_not_run(tmp_path):
    # As llama.cpp's main pass: the MTP block (full attention, after the trunk) is loaded but not executed.
    plain = Model.open(write_qwen35moe(tmp_path / "plain.gguf", Shape(), seed=5))
    with_mtp = Model.open(write_qwen35moe(tmp_path / "mtp.gguf", Shape(mtp=1), seed=5))
    assert with_mtp.file.tensors.keys() > plain.file.tensors.keys()
    assert with_mtp.config.mixers == plain.config.mixers == ("linear", "linear", "linear", "full")
    a = Session(plain).feed(PROMPT, phase="prefill", all_logits=True).all_logits
    b = Session(with_mtp).feed(PROMPT, phase="prefill", all_logits=True).all_logits
    assert np.array_equal(a, b)


def test_rebuilding_the_fixture_with_the_builder_gives_its_tensors(tmp_path):
    # The builder writes the fixture's layout: same tensor names, shapes and metadata sizes.
    ours = open_gguf(write_qwen35moe(tmp_path / "m.gguf", Shape()))
    ref = open_gguf(FIXTURE)
    assert {n: t.shape for n, t in ours.tensors.items()} == {n: t.shape for n, t in ref.tensors.items()}
    assert build_card(ours).layers == build_card(ref).layers


# ---- the pieces, against definitions computed here -----------------------------------------------

def test_delta_rule_is_the_recurrence_written_out():
    rng = np.random.default_rng(1)
    n, hv, dv, dk = 5, 3, 4, 6
    q, k = rng.standard_normal((n, hv, dk)), rng.standard_normal((n, hv, dk))
    v = rng.standard_normal((n, hv, dv))
    decay, beta = rng.uniform(0.5, 1.0, (n, hv)), rng.uniform(0.0, 1.0, (n, hv))
    state = np.zeros((hv, dv, dk), np.float32)
    out = deltanet.delta_rule(state, *(a.astype(np.float32) for a in (q, k, v, decay, beta)))
    for h in range(hv):  # the README's form: S as [dk, dv], delta = (v - k.S) * beta, S += outer(k, delta)
        s = np.zeros((dk, dv))
        for t in range(n):
            s *= decay[t, h]
            delta = (v[t, h] - k[t, h] @ s) * beta[t, h]
            s += np.outer(k[t, h], delta)
            assert np.allclose(out[t, h], q[t, h] @ s / np.sqrt(dk), atol=1e-5)
        assert np.allclose(state[h], s.T, atol=1e-5)


def test_causal_conv_sees_the_last_kernel_inputs_across_passes():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    padded = np.concatenate([np.zeros((3, 3), np.float32), x])
    expected = np.stack([(padded[t : t + 4] * w.T).sum(axis=0) for t in range(7)])
    whole, _ = deltanet.causal_conv(x, np.zeros((3, 3), np.float32), w)
    first, state = deltanet.causal_conv(x[:2], np.zeros((3, 3), np.float32), w)
    rest, _ = deltanet.causal_conv(x[2:], state, w)
    assert np.allclose(whole, expected, atol=1e-5)
    assert np.allclose(np.concatenate([first, rest]), expected, atol=1e-5)


def test_text_positions_turn_every_pair_of_the_published_sections():
    f = open_gguf(FIXTURE)
    sections = tuple(int(s) for s in f.get("qwen35moe.rope.dimension_sections"))
    assert text_rope_pairs(sections, f.get("qwen35moe.rope.dimension_count") // 2).all()  # plain NEOX
    assert text_rope_pairs((11, 11, 10, 0), 32).all()  # Qwen3.5/3.6 MoE: rope over 64 of 256 dims
    # a pair in the fourth section gets the fourth position, 0 for text: it does not turn
    assert text_rope_pairs((1, 1, 1, 1), 4).tolist() == [True, True, True, False]


def test_trace_shows_both_kinds_of_layer(capsys):
    from walkthrough.cli import main

    assert main(["trace", str(FIXTURE), "--ids", "5,6,7,8", "--steps", "3", "--chunk", "2"]) == 0
    out = capsys.readouterr().out
    assert "layers: lllF" in out
    assert "fixed state: linear attention (layers 0, 1, 2)" in out
    assert "KV cache: full attention (layer 3): 6 rows" in out
    assert main(["trace", str(FIXTURE), "--ids", "5,6,7,8", "--steps", "2", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [layer["kind"] for layer in records[-1]["layers"]] == ["linear", "linear", "linear", "full"]
    assert records[-1]["layers"][3]["kv_len"] == 5 and records[0]["layers"][3]["kv_len"] == 4
    assert records[0]["layers"][0]["state_bytes"] == records[-1]["layers"][0]["state_bytes"] > 0

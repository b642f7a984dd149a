"""Model card tests: every number equals a sum this file computes on its own from the tensor table.

The expected values are never typed in. For the reference models they come from
`gguf.GGUFReader` (an independent reader) and this file's own loops over tensor
names and shapes; for built files, from the shapes the test itself chose.
The KV width of a layer is read off its `attn_k`/`attn_v` output sizes and the
recurrent state off its `ssm_conv1d`/`ssm_a`/`ssm_norm` shapes, not from the
metadata the card uses, so a wrong key reading shows up as a mismatch.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from conftest import FIXTURES_DIR
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V
from gguf_builder import Tensor, write_gguf
from rich.text import Text

from walkthrough.inspect.card import CardError, build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.render.file_view import overview

F32_STATE_BYTES = 4  # llama.cpp keeps recurrent states in F32


REFERENCE = sorted((FIXTURES_DIR / "reference").glob("*.gguf"))
VOCAB = sorted((FIXTURES_DIR / "vocab").glob("*.gguf"))


def test_fixture_models_are_present(fixtures_dir: Path) -> None:
    """The parametrized tests below run once per file: none found would silently test nothing."""
    assert len(REFERENCE) >= 7 and len(VOCAB) >= 5


# ---- independent computation ------------------------------------------------------------------


def bytes_per_value(type_name: str) -> float:
    block, size = GGML_QUANT_SIZES[Q[type_name.upper()]]
    return size / block


def layer_of(name: str) -> int | None:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def expected_numbers(tensors: list[tuple[str, tuple[int, ...], str, int]], meta: dict) -> dict:
    """Card numbers from (name, ggml shape, type name, nbytes) rows and a few keys, with plain loops.

    Rules from the issue: routed experts count used/total, the embedding one row
    (all of it when the head reuses it), multi-token-prediction blocks nothing.
    """
    by_name = {name: (shape, nbytes) for name, shape, _, nbytes in tensors}
    indices = [i for i in map(layer_of, by_name) if i is not None]
    n_blocks = meta.get("block_count") or 1 + max(indices, default=-1)
    first_mtp = n_blocks - meta.get("nextn_predict_layers", 0)
    experts, used = meta.get("expert_count", 0), meta.get("expert_used_count", 0)
    tied = "output.weight" not in by_name
    total = active = read = 0
    by_type: dict[str, int] = {}
    for name, shape, type_name, nbytes in tensors:
        n = math.prod(shape)
        total += n
        by_type[type_name] = by_type.get(type_name, 0) + nbytes
        layer = layer_of(name)
        if layer is not None and layer >= first_mtp:
            share = 0
        elif "_exps" in name:
            share = used / experts
        elif name == "token_embd.weight" and not tied:
            share = 1 / shape[1]
        else:
            share = 1
        active += n * share
        read += nbytes * share
    kv_values = state_values = 0
    for layer in range(first_mtp):
        k, v = by_name.get(f"blk.{layer}.attn_k.weight"), by_name.get(f"blk.{layer}.attn_v.weight")
        if k is not None:
            kv_values += k[0][1] + v[0][1]
        conv = by_name.get(f"blk.{layer}.ssm_conv1d.weight")
        if conv is not None:  # Gated DeltaNet: conv window x channels, then v_heads x head_v x head_v
            v_heads = by_name[f"blk.{layer}.ssm_a"][0][0]
            head_v = by_name[f"blk.{layer}.ssm_norm.weight"][0][0]
            state_values += (conv[0][0] - 1) * conv[0][1] + v_heads * head_v * head_v
    return {
        "n_params": total,
        "n_params_active": round(active),
        "bytes_by_type": by_type,
        "bits_per_weight": 8 * sum(by_type.values()) / total if total else 0.0,
        "bytes_per_token": round(read),
        "kv_bytes_per_token": {c: round(kv_values * bytes_per_value(c)) for c in ("f16", "q8_0", "q4_0")},
        "state_bytes": state_values * F32_STATE_BYTES,
    }


def read_with_gguf_package(path: Path) -> tuple[list, dict]:
    """Tensor rows and the hyperparameters the rules need, through gguf.GGUFReader."""
    reader = GGUFReader(path)
    arch = reader.fields["general.architecture"].contents()
    meta = {}
    for key in ("block_count", "nextn_predict_layers", "expert_count", "expert_used_count"):
        field = reader.fields.get(f"{arch}.{key}")
        if field is not None:
            meta[key] = int(field.contents())
    rows = [(t.name, tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.n_bytes)) for t in reader.tensors]
    return rows, meta


def assert_card_matches(card, expected: dict) -> None:
    assert card.n_params == expected["n_params"]
    assert card.n_params_active == expected["n_params_active"]
    assert card.bytes_by_type == expected["bytes_by_type"]
    assert card.bits_per_weight == pytest.approx(expected["bits_per_weight"], rel=1e-12)
    assert card.bytes_per_token == expected["bytes_per_token"]
    assert card.kv_bytes_per_token == expected["kv_bytes_per_token"]
    assert card.state_bytes == expected["state_bytes"]


# ---- building files ---------------------------------------------------------------------------


def typed(value) -> tuple:
    """A Python value as the builder's typed metadata entry."""
    if isinstance(value, str):
        return (V.STRING, value)
    if isinstance(value, float):
        return (V.FLOAT32, value)
    if isinstance(value, list):
        element = V.BOOL if all(isinstance(v, bool) for v in value) else V.INT32
        return (V.ARRAY, element, value)
    return (V.UINT32, value)


def build(tmp_path: Path, arch: str, hparams: dict, tensors: list[Tensor], *, sparse: bool = False,
          name: str = "model.gguf", extra: dict | None = None):
    """Write a GGUF with `{arch}.{key}` hyperparameters and open it with the project's reader."""
    metadata = {"general.architecture": typed(arch)}
    metadata |= {f"{arch}.{k}": typed(v) for k, v in hparams.items()}
    metadata |= {k: typed(v) for k, v in (extra or {}).items()}
    path = write_gguf(tmp_path / name, metadata, tensors, sparse=sparse)
    return open_gguf(path)


def rows_of(tensors: list[Tensor]) -> list[tuple[str, tuple[int, ...], str, int]]:
    out = []
    for t in tensors:
        block, size = GGML_QUANT_SIZES[Q(t.ggml_type)]
        out.append((t.name, t.shape, Q(t.ggml_type).name, math.prod(t.shape) // block * size))
    return out


def dense_block(i: int, width: int, kv_out: int, ff: int, typ=Q.F32) -> list[Tensor]:
    return [
        Tensor(f"blk.{i}.attn_norm.weight", (width,)),
        Tensor(f"blk.{i}.attn_q.weight", (width, width), typ),
        Tensor(f"blk.{i}.attn_k.weight", (width, kv_out), typ),
        Tensor(f"blk.{i}.attn_v.weight", (width, kv_out), typ),
        Tensor(f"blk.{i}.attn_output.weight", (width, width), typ),
        Tensor(f"blk.{i}.ffn_norm.weight", (width,)),
        Tensor(f"blk.{i}.ffn_gate.weight", (width, ff), typ),
        Tensor(f"blk.{i}.ffn_up.weight", (width, ff), typ),
        Tensor(f"blk.{i}.ffn_down.weight", (ff, width), typ),
    ]


def moe_ffn(i: int, width: int, ff: int, experts: int, typ=Q.F32) -> list[Tensor]:
    return [
        Tensor(f"blk.{i}.ffn_norm.weight", (width,)),
        Tensor(f"blk.{i}.ffn_gate_inp.weight", (width, experts)),
        Tensor(f"blk.{i}.ffn_gate_exps.weight", (width, ff, experts), typ),
        Tensor(f"blk.{i}.ffn_up_exps.weight", (width, ff, experts), typ),
        Tensor(f"blk.{i}.ffn_down_exps.weight", (ff, width, experts), typ),
    ]


def attention(i: int, width: int, kv_out: int, typ=Q.F32) -> list[Tensor]:
    return [t for t in dense_block(i, width, kv_out, 32, typ) if "ffn" not in t.name]


def head(width: int, vocab: int, *, tied: bool = False) -> list[Tensor]:
    out = [Tensor("token_embd.weight", (width, vocab)), Tensor("output_norm.weight", (width,))]
    return out if tied else [*out, Tensor("output.weight", (width, vocab))]


# ---- reference models -----------------------------------------------------------------------


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: p.name)
def test_reference_card_equals_independent_sums(path: Path, fixtures_dir: Path) -> None:
    rows, meta = read_with_gguf_package(path)
    with open_gguf(path) as f:
        card = build_card(f)
    assert_card_matches(card, expected_numbers(rows, meta))
    assert card.n_layers == meta["block_count"] - meta.get("nextn_predict_layers", 0)
    assert card.n_tensors == len(rows)
    kv_layers = sorted({layer_of(name) for name, *_ in rows if name.endswith(".attn_k.weight")})
    assert card.kv_layers == kv_layers
    recurrent = sorted({layer_of(name) for name, *_ in rows if ".ssm_" in name})
    assert card.linear_layers == recurrent
    assert card.unknown == ()


def test_reference_moe_layers_and_experts_are_read_from_the_file(fixtures_dir: Path) -> None:
    rows, meta = read_with_gguf_package(fixtures_dir / "reference/ref-qwen2moe-f32.gguf")
    with open_gguf(fixtures_dir / "reference/ref-qwen2moe-f32.gguf") as f:
        card = build_card(f)
    expert_shapes = {shape for name, shape, *_ in rows if name.endswith("_exps.weight")}
    assert card.n_experts == meta["expert_count"] == {s[-1] for s in expert_shapes}.pop()
    assert card.n_experts_used == meta["expert_used_count"]
    assert [layer.ffn for layer in card.layers] == ["moe"] * meta["block_count"]
    assert card.n_shared_experts == 1 and all(layer.shared_expert for layer in card.layers)


@pytest.mark.parametrize("path", VOCAB, ids=lambda p: p.name)
def test_vocab_only_files_give_a_card_from_metadata(path: Path, fixtures_dir: Path) -> None:
    with open_gguf(path) as f:
        card = build_card(f)
        arch = f.get("general.architecture")
        n_layers, n_embd = f.get(f"{arch}.block_count"), f.get(f"{arch}.embedding_length")
        n_head = f.get(f"{arch}.attention.head_count")
        n_kv = f.get(f"{arch}.attention.head_count_kv", n_head)
        n_tokens = len(f.get("tokenizer.ggml.tokens"))
    assert card.n_tensors == card.n_params == 0 and card.bytes_by_type == {}
    assert card.vocab_size == n_tokens
    assert card.n_layers == n_layers
    # 2 (K and V) x layers x KV heads x head size x 2 bytes (F16)
    assert card.kv_bytes_per_token["f16"] == 2 * n_layers * n_kv * (n_embd // n_head) * 2


# ---- built files: the rules the reference models do not exercise -------------------------------------


def test_tied_embeddings_count_the_matrix_once(tmp_path: Path) -> None:
    tensors = head(64, 100, tied=True) + dense_block(0, 64, 32, 128)
    f = build(tmp_path, "llama", {"block_count": 1, "embedding_length": 64, "attention.head_count": 4,
                                  "attention.head_count_kv": 2, "context_length": 128}, tensors)
    card = build_card(f)
    assert card.tied_embeddings
    assert_card_matches(card, expected_numbers(rows_of(tensors), {"block_count": 1}))
    assert card.n_params_active == card.n_params  # a dense model with a tied head reads everything


def test_unknown_architecture_gets_what_the_tensor_table_allows(tmp_path: Path) -> None:
    width, vocab, kv_out, ff, experts = 64, 96, 32, 32, 4
    tensors = head(width, vocab)
    for i in range(3):
        tensors += attention(i, width, kv_out) + moe_ffn(i, width, ff, experts)
    f = build(tmp_path, "mystery", {}, tensors)
    card = build_card(f)
    rows = rows_of(tensors)
    assert card.architecture == "mystery"
    assert card.n_layers == 3 and card.n_embd == width and card.vocab_size == vocab
    assert card.n_experts == experts and card.n_experts_used is None
    assert card.n_params == sum(math.prod(shape) for _, shape, _, _ in rows)
    by_type: dict[str, int] = {}
    for _, _, type_name, nbytes in rows:
        by_type[type_name] = by_type.get(type_name, 0) + nbytes
    assert card.bytes_by_type == by_type
    assert card.kv_bytes_per_token["f16"] == 3 * 2 * kv_out * 2  # from the attn_k/attn_v shapes
    assert card.n_params_active is None and card.bytes_per_token is None
    assert card.active_share is None
    overview(f, card, Text())  # the File stage shows a card whose active share is unknown
    for name in ("n_experts_used", "n_params_active", "bytes_per_token", "context_length", "n_head"):
        assert name in card.unknown
    assert "vocab_size" not in card.unknown and "n_layers" not in card.unknown


def test_unknown_architecture_with_experts_used_gets_active_numbers(tmp_path: Path) -> None:
    tensors = head(64, 96) + attention(0, 64, 32) + moe_ffn(0, 64, 32, 4)
    f = build(tmp_path, "mystery", {"expert_used_count": 2}, tensors)
    card = build_card(f)
    meta = {"expert_count": 4, "expert_used_count": 2}
    assert_card_matches(card, expected_numbers(rows_of(tensors), meta))
    assert "n_params_active" not in card.unknown
    assert card.active_share == card.n_params_active / card.n_params


def test_per_layer_kv_heads_array(tmp_path: Path) -> None:
    kv_heads, head_dim = [4, 0, 2, 1], 16
    f = build(tmp_path, "llama", {"block_count": 4, "embedding_length": 64, "attention.head_count": 4,
                                  "attention.head_count_kv": kv_heads, "context_length": 64}, [])
    card = build_card(f)
    assert [layer.n_head_kv for layer in card.layers] == [4, None, 2, 1]
    assert [layer.attention for layer in card.layers] == ["full", "none", "full", "full"]
    assert card.kv_bytes_per_token["f16"] == sum(2 * h * head_dim * 2 for h in kv_heads)


def test_per_layer_feed_forward_lengths(tmp_path: Path) -> None:
    widths = [128, 64, 96]
    tensors = head(64, 32)
    for i, ff in enumerate(widths):
        tensors += dense_block(i, 64, 32, ff)
    f = build(tmp_path, "llama", {"block_count": 3, "embedding_length": 64, "attention.head_count": 4,
                                  "feed_forward_length": widths}, tensors)
    card = build_card(f)
    assert [layer.n_ff for layer in card.layers] == widths
    up = {layer_of(t.name): t.shape[1] for t in tensors if t.name.endswith("ffn_up.weight")}
    assert [layer.n_ff for layer in card.layers] == [up[i] for i in range(3)]


def test_moe_with_leading_dense_layers(tmp_path: Path) -> None:
    width, experts, used = 64, 8, 2
    tensors = head(width, 32) + dense_block(0, width, 32, 128)
    for i in (1, 2):
        tensors += attention(i, width, 32) + moe_ffn(i, width, 32, experts)
    hp = {"block_count": 3, "embedding_length": width, "attention.head_count": 4, "attention.head_count_kv": 2,
          "expert_count": experts,
          "expert_used_count": used, "leading_dense_block_count": 1}
    card = build_card(build(tmp_path, "deepseek2", hp, tensors))
    assert [layer.ffn for layer in card.layers] == ["dense", "moe", "moe"]
    assert_card_matches(card, expected_numbers(rows_of(tensors), hp))
    # Without tensors the metadata alone says the same.
    meta_only = build_card(build(tmp_path, "deepseek2", hp | {"feed_forward_length": 128}, [], name="m.gguf"))
    assert [layer.ffn for layer in meta_only.layers] == ["dense", "moe", "moe"]


def test_sliding_window_from_the_architecture_default(tmp_path: Path) -> None:
    window, n_layers, head_dim, kv_heads = 512, 12, 16, 2
    hp = {"block_count": n_layers, "embedding_length": 64, "attention.head_count": 4,
          "attention.head_count_kv": kv_heads, "attention.sliding_window": window, "context_length": 8192}
    card = build_card(build(tmp_path, "gemma3", hp, []))
    # gemma3 in llama.cpp: five sliding layers, then one global (src/models/gemma3.cpp load_swa_pattern(ml, 6))
    full = [i for i in range(n_layers) if i % 6 == 5]
    assert [layer.index for layer in card.layers if layer.attention == "full"] == full
    assert all(layer.sliding_window == window for layer in card.layers if layer.attention == "sliding")
    per_layer = 2 * kv_heads * head_dim * 2
    assert card.kv_bytes_per_token["f16"] == n_layers * per_layer
    n = 4096
    assert card.kv_bytes(n) == len(full) * per_layer * n + (n_layers - len(full)) * per_layer * window


def test_sliding_window_explicit_pattern_and_undeclared_pattern(tmp_path: Path) -> None:
    pattern = [True, False, True, False]
    hp = {"block_count": 4, "embedding_length": 64, "attention.head_count": 4, "attention.sliding_window": 128}
    card = build_card(build(tmp_path, "mystery", hp | {"attention.sliding_window_pattern": pattern}, []))
    assert [layer.attention == "sliding" for layer in card.layers] == pattern
    unsure = build_card(build(tmp_path, "mystery", hp, [], name="u.gguf"))
    assert all(layer.attention == "full" for layer in unsure.layers)
    assert "sliding_window_layers" in unsure.unknown


def test_hostile_counts_do_not_raise(tmp_path: Path) -> None:
    hp = {"block_count": 2, "embedding_length": "wide", "attention.head_count": float("nan"),
          "attention.head_count_kv": ["a", "b"], "context_length": -5}
    metadata_types = {"context_length": (V.INT32, -5), "attention.head_count_kv": (V.ARRAY, V.STRING, ["a", "b"])}
    metadata = {"general.architecture": typed("llama")}
    metadata |= {f"llama.{k}": metadata_types.get(k, typed(v)) for k, v in hp.items()}
    card = build_card(open_gguf(write_gguf(tmp_path / "h.gguf", metadata, [])))
    assert card.n_embd is None and card.n_head is None and card.context_length is None
    assert {"n_embd", "n_head", "context_length", "kv_bytes_per_token"} <= set(card.unknown)


def test_implausible_layer_count_is_refused_in_one_line(tmp_path: Path) -> None:
    f = build(tmp_path, "llama", {"block_count": 4_000_000_000}, [])
    with pytest.raises(CardError, match="block_count") as err:
        build_card(f)
    assert "\n" not in str(err.value)


# ---- Qwen3.6-35B-A3B-shaped header (issue 8) ----------------------------------------------------

# Published shapes of Qwen3.6-35B-A3B (model card at huggingface.co/Qwen/Qwen3.6-35B-A3B, quoted at
# mera.a-ai.ru/en/industrial/submits/181): 40 layers as 10 x (3 Gated DeltaNet + 1 gated attention),
# width 2048, attention 16 Q / 2 KV heads of 256, rotary 64 dims, DeltaNet 16 QK / 32 V heads of 128,
# 256 experts (8 routed + 1 shared) of width 512, vocabulary 248,320; one MTP block. The DeltaNet
# conv kernel (4) is the Qwen3-Next/Qwen3.5 config's linear_conv_kernel_dim.
QWEN36 = {
    "block_count": 41, "nextn_predict_layers": 1, "context_length": 262_144, "embedding_length": 2048,
    "attention.head_count": 16, "attention.head_count_kv": 2, "attention.key_length": 256,
    "attention.value_length": 256, "rope.dimension_count": 64, "full_attention_interval": 4,
    "expert_count": 256, "expert_used_count": 8, "expert_feed_forward_length": 512,
    "expert_shared_feed_forward_length": 512, "ssm.conv_kernel": 4, "ssm.inner_size": 32 * 128,
    "ssm.state_size": 128, "ssm.time_step_rank": 32, "ssm.group_count": 16,
}
QWEN36_VOCAB = 248_320


def qwen36_tensors(hp: dict = QWEN36, vocab: int = QWEN36_VOCAB) -> list[Tensor]:
    """The tensor table llama.cpp's src/models/qwen35moe.cpp loads for those shapes (weights Q8_0); `hp` may
    give other widths (tests/bench/qwen36_shaped.py --scaled), the last block being the MTP block."""
    w = hp["embedding_length"]
    trunk = hp["block_count"] - hp["nextn_predict_layers"]
    heads, kv, hd = hp["attention.head_count"], hp["attention.head_count_kv"], hp["attention.key_length"]
    qk, v = hp["ssm.group_count"] * hp["ssm.state_size"], hp["ssm.inner_size"]
    experts, ff = hp["expert_count"], hp["expert_feed_forward_length"]
    m = Q.Q8_0
    tensors = [Tensor("token_embd.weight", (w, vocab), m), Tensor("output_norm.weight", (w,)),
               Tensor("output.weight", (w, vocab), m)]
    for i in range(hp["block_count"]):
        b = f"blk.{i}."
        tensors += [Tensor(b + "attn_norm.weight", (w,)), Tensor(b + "post_attention_norm.weight", (w,))]
        if i < trunk and (i + 1) % hp["full_attention_interval"]:
            tensors += [
                Tensor(b + "attn_qkv.weight", (w, 2 * qk + v), m), Tensor(b + "attn_gate.weight", (w, v), m),
                Tensor(b + "ssm_conv1d.weight", (hp["ssm.conv_kernel"], 2 * qk + v)),
                Tensor(b + "ssm_dt.bias", (hp["ssm.time_step_rank"],)),
                Tensor(b + "ssm_a", (hp["ssm.time_step_rank"],)),
                Tensor(b + "ssm_beta.weight", (w, hp["ssm.time_step_rank"]), m),
                Tensor(b + "ssm_alpha.weight", (w, hp["ssm.time_step_rank"]), m),
                Tensor(b + "ssm_norm.weight", (hp["ssm.state_size"],)), Tensor(b + "ssm_out.weight", (v, w), m),
            ]
        else:
            tensors += [
                Tensor(b + "attn_q.weight", (w, heads * hd * 2), m), Tensor(b + "attn_k.weight", (w, kv * hd), m),
                Tensor(b + "attn_v.weight", (w, kv * hd), m), Tensor(b + "attn_output.weight", (heads * hd, w), m),
                Tensor(b + "attn_q_norm.weight", (hd,)), Tensor(b + "attn_k_norm.weight", (hd,)),
            ]
        tensors += [
            Tensor(b + "ffn_gate_inp.weight", (w, experts)),
            Tensor(b + "ffn_gate_exps.weight", (w, ff, experts), m), Tensor(b + "ffn_up_exps.weight", (w, ff, experts), m),
            Tensor(b + "ffn_down_exps.weight", (ff, w, experts), m), Tensor(b + "ffn_gate_inp_shexp.weight", (w,)),
            Tensor(b + "ffn_gate_shexp.weight", (w, ff), m), Tensor(b + "ffn_up_shexp.weight", (w, ff), m),
            Tensor(b + "ffn_down_shexp.weight", (ff, w), m),
        ]
        if i == trunk:
            tensors += [Tensor(b + "nextn.eh_proj.weight", (2 * w, w), m), Tensor(b + "nextn.enorm.weight", (w,)),
                        Tensor(b + "nextn.hnorm.weight", (w,)), Tensor(b + "nextn.shared_head_norm.weight", (w,))]
    return tensors


def check_qwen36_cache(card) -> None:
    full = [i for i in range(40) if (i + 1) % 4 == 0]
    kv_per_token = 2 * len(full) * 2 * 256 * 2  # K and V x 10 layers x 2 heads x 256 x 2 bytes (F16)
    assert card.kv_bytes_per_token["f16"] == kv_per_token
    assert card.kv_bytes(16_384) == kv_per_token * 16_384
    assert round(card.kv_bytes(16_384) / 1e6) == 336  # "about 335 MB" (335.5 MB)
    assert round(card.kv_bytes(262_144) / 1e9, 1) == 5.4
    assert card.kv_layers == full
    assert card.linear_layers == [i for i in range(40) if i not in full]
    assert card.n_layers == 40 and card.n_mtp_layers == 1 and card.layers[40].mtp
    assert not card.layers[40].keeps_kv and card.layers[40].state_bytes == 0
    # llama.cpp's n_embd_r + n_embd_s (src/llama-hparams.cpp), F32, computed here from the keys:
    conv = (4 - 1) * (32 * 128 + 2 * 16 * 128)
    recurrent = 128 * 32 * 128
    per_layer = (conv + recurrent) * F32_STATE_BYTES
    assert {layer.state_bytes for layer in card.layers if layer.attention == "linear"} == {per_layer}
    assert card.state_bytes == 30 * per_layer


def test_qwen36_shaped_header_only_card(tmp_path: Path) -> None:
    tensors = qwen36_tensors()
    f = build(tmp_path, "qwen35moe", QWEN36, tensors, sparse=True)
    assert (tmp_path / "model.gguf").stat().st_blocks * 512 < 64 << 20  # the data is a hole: header only
    card = build_card(f)
    check_qwen36_cache(card)
    rows = rows_of(tensors)
    expected = expected_numbers(rows, QWEN36)
    assert_card_matches(card, expected)
    assert card.vocab_size == QWEN36_VOCAB
    # The published label, "35B in total and 3B activated", is for the trunk without the MTP block.
    trunk = card.n_params - card.layers[40].n_params
    assert round(trunk / 1e9) == 35 and round(card.n_params_active / 1e9) == 3
    # The state from the tensor shapes (expected_numbers) agrees with the one from the keys (check above).
    assert expected["state_bytes"] == card.state_bytes


def test_qwen36_shaped_metadata_only_card(tmp_path: Path) -> None:
    card = build_card(build(tmp_path, "qwen35moe", QWEN36, []))
    check_qwen36_cache(card)
    assert card.n_params == 0
    assert all(layer.ffn == "moe" for layer in card.layers)

"""Project a direction out of every matrix that writes into the residual stream, and write the edited GGUF.

What each layer adds to the stream comes out of one matrix (numpy order [.., d, n_in]: the
output rows are the stream's width d) and, where the file has one, a bias [d]:
`attn_output` (attention), `ssm_out` (Gated DeltaNet), `ffn_down` (dense FFN), `ffn_down_exps`
(every routed expert), `ffn_down_shexp` (the shared expert). The stream starts as a row of
`token_embd` [n_vocab, d]. With u the unit direction:

    W' = W - u (u^T W)      b' = b - u (u . b)      E' = E - (E u) u^T

so u . (W' x) = 0 for every input x: no layer can write along u any more, and no token starts
along it. A scale applied after the matrix (a router weight, the shared expert's gate, a layer's
output scale) keeps that true. A norm applied after the matrix (gemma's sandwich norms) does not:
such files are refused. When the output head reuses the embedding (tied), the original embedding is
written as `output.weight`, so the head reads as before.

Edited tensors are dequantized, edited in float64 and stored as F32 (or F16 with `store="f16"`:
half the size, and what is left along u is then F16 rounding); every other tensor keeps its
stored bytes, and the metadata is copied with three keys added (`walkthrough.abliteration.*`:
the behaviour, the layer, the direction). The file is written with gguf's GGUFWriter into a
stream the caller opens (`safewrite.Writer.stream`, which never replaces a file it did not make).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import BinaryIO

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.gguf_writer import WriterState

from walkthrough.engine.glassbox.config import Config
from walkthrough.engine.glassbox.weights import dequantize_rows
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile

WRITERS = ("attn_output", "ssm_out", "ffn_down", "ffn_down_exps", "ffn_down_shexp")
_WRITER = re.compile(r"blk\.\d+\.(" + "|".join(WRITERS) + r")\.(weight|bias)")
EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"
STORES = {"f32": np.float32, "f16": np.float16}
SKIPPED_KEYS = ("GGUF.", "general.architecture")  # written by GGUFWriter itself
KEY = "walkthrough.abliteration."


def residual_writers(f: GGUFFile) -> list[str]:
    """The tensors whose output is added to the residual stream, in file order."""
    return [n for n in f.tensors if n == EMBEDDING or _WRITER.fullmatch(n)]


def check_editable(config: Config) -> None:
    """Raise unless projecting the writers' matrices removes the direction from what they add."""
    spec = config.spec
    if spec.attn_post_norm or spec.ffn_post_norm:
        raise WalkthroughError(
            "this architecture normalises each layer's output after its matrix (post-norms), so a direction "
            "projected out of the matrix comes back; abliteration here needs a model without them")


def project_out(values: np.ndarray, unit: np.ndarray, name: str) -> np.ndarray:
    """One tensor (numpy order) with the direction removed from what it writes (float64)."""
    v = values.astype(np.float64)
    if name == EMBEDDING:  # [n_vocab, d]: rows are stream vectors
        return v - np.outer(v @ unit, unit)
    if name.endswith(".bias"):  # [d]
        return v - unit * (unit @ v)
    along = np.einsum("d,...dn->...n", unit, v)  # [.., n_in]: u^T W
    return v - unit[:, None] * along[..., None, :]  # [.., d, n_in]


def _raw(f: GGUFFile, name: str) -> tuple[np.ndarray, int]:
    t = f.tensors[name]
    data = f.tensor_bytes(name)
    return data.reshape(*t.np_shape[:-1], -1), t.ggml_type


def edited_values(f: GGUFFile, name: str, unit: np.ndarray) -> np.ndarray:
    """The tensor dequantized (numpy order) with the direction projected out, float64."""
    t = f.tensors[name]
    values = dequantize_rows(f.tensor_bytes(name), t.ggml_type, t.shape[0], name).reshape(t.np_shape)
    return project_out(values, unit, name)


def write_edited(
    f: GGUFFile, unit: np.ndarray, out: BinaryIO, *, layer: int, behaviour: str, store: str = "f32",
    progress=None,
) -> list[str]:
    """Write `f` with `unit` projected out of its residual writers into the open binary stream `out`.

    Returns:
        the names of the edited tensors.
    """
    dtype = STORES[store]
    reader = GGUFReader(f.path)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(None, arch)
    for key, field in reader.fields.items():
        if key.startswith(SKIPPED_KEYS) or key.startswith(KEY):
            continue
        sub = field.types[1] if field.types[0] == GGUFValueType.ARRAY and len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    writer.add_string(KEY + "behaviour", behaviour)
    writer.add_uint32(KEY + "layer", layer)
    writer.add_array(KEY + "direction", [float(x) for x in unit])
    edited = set(residual_writers(f))
    for k, name in enumerate(f.tensors):
        if progress is not None:
            progress(k, len(f.tensors))
        if name in edited:
            writer.add_tensor(name, edited_values(f, name, unit).astype(dtype))
        else:
            data, ggml_type = _raw(f, name)
            writer.add_tensor(name, data, raw_dtype=ggml_type)
        if name == EMBEDDING and OUTPUT not in f.tensors:  # tied head: keep reading the original rows
            data, ggml_type = _raw(f, name)
            writer.add_tensor(OUTPUT, data, raw_dtype=ggml_type)
    writer.fout, writer.state = [out], WriterState.EMPTY  # the caller's stream (GGUFWriter writes, we close)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.flush()
    writer.fout = None
    return [n for n in f.tensors if n in edited]


def along(f: GGUFFile, names: Iterable[str], unit: np.ndarray) -> dict[str, float]:
    """Per tensor, the largest |u . column| of what it writes relative to its largest column length:
    how much a writer can still add along u (0 after the edit, up to float rounding)."""
    out = {}
    for name in names:
        t = f.tensors[name]
        v = dequantize_rows(f.tensor_bytes(name), t.ggml_type, t.shape[0], name).reshape(t.np_shape)
        v = v.astype(np.float64)
        if name == EMBEDDING:
            proj, size = v @ unit, np.linalg.norm(v, axis=-1)
        elif name.endswith(".bias"):
            proj, size = np.array([unit @ v]), np.array([np.linalg.norm(v)])
        else:
            proj = np.einsum("d,...dn->...n", unit, v)
            size = np.linalg.norm(v, axis=-2)
        out[name] = float(np.max(np.abs(proj)) / max(float(np.max(size)), 1e-30))
    return out

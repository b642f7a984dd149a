"""Assemble GGUF files byte by byte for tests: valid ones, header-only ones, and broken ones.

Two levels:

- `build_gguf(metadata, tensors)` returns the bytes of a whole valid file;
  `write_gguf(path, metadata, tensors, sparse=True)` writes it with the tensor
  data left as a hole (no disk used), so a header describing a 70B model opens.
- The pieces those are made of (`header`, `string`, `kv`, `tensor_info`,
  `u32`, `u64`, `padding`) assemble deliberately broken files by hand.

Metadata values carry explicit types (`GGUFValueType`, the gguf package's enum):
scalars and strings as `(type, value)`, arrays as `(ARRAY, element_type, values)`.
Tensor shapes are in ggml order (ne0, the row length, first). Sizes come from
the gguf package's `GGML_QUANT_SIZES` table, not from the reader under test.

Example:
    >>> from gguf.constants import GGMLQuantizationType as Q, GGUFValueType as V
    >>> blob = build_gguf(
    ...     {"general.architecture": (V.STRING, "llama"),
    ...      "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, ["a", "b"])},
    ...     [Tensor("token_embd.weight", (32, 2), Q.Q8_0)],
    ... )
    >>> blob[:4]
    b'GGUF'
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.gguf_reader import GGUFReader

DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT in ggml's gguf.h

MetadataValue = tuple  # (type, value) or (GGUFValueType.ARRAY, element_type, values)


@dataclass(frozen=True)
class Tensor:
    """A tensor to place in a built file.

    `offset` (relative to the data section) is computed when None: the next
    aligned position after the previous tensor. `data` defaults to zeros.
    """

    name: str | bytes
    shape: tuple[int, ...]
    ggml_type: int = GGMLQuantizationType.F32
    data: bytes | None = None
    offset: int | None = None


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def string(s: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string: u64 byte length (or the `length` given, to lie about it) then the bytes."""
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return u64(len(raw) if length is None else length) + raw


def value(vtype: int, v: Any) -> bytes:
    """The bytes of one scalar or string value (no type tag)."""
    if vtype == GGUFValueType.STRING:
        return string(v)
    np_type = GGUFReader.gguf_scalar_to_np[GGUFValueType(vtype)]  # the gguf package's own table
    return np.array(v, dtype=np.dtype(np_type).newbyteorder("<")).tobytes()


def array(element_type: int, values: Sequence[Any]) -> bytes:
    """An array value after its ARRAY type tag: element type, count, elements."""
    return u32(element_type) + u64(len(values)) + b"".join(value(element_type, v) for v in values)


def kv(key: str | bytes, v: MetadataValue) -> bytes:
    """One metadata entry: key, type tag, value. `v` as in `build_gguf`'s metadata."""
    vtype = v[0]
    if vtype == GGUFValueType.ARRAY:
        return string(key) + u32(vtype) + array(v[1], v[2])
    return string(key) + u32(vtype) + value(vtype, v[1])


def tensor_info(name: str | bytes, shape: Sequence[int], ggml_type: int, offset: int) -> bytes:
    """One row of the tensor table: name, n_dims, dims (ggml order), type, relative data offset."""
    return (
        string(name)
        + u32(len(shape))
        + b"".join(u64(d) for d in shape)
        + u32(ggml_type)
        + u64(offset)
    )


def header(n_tensors: int, n_kv: int, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    """The fixed 24-byte header."""
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)


def padding(n: int, alignment: int = DEFAULT_ALIGNMENT) -> bytes:
    """Zero bytes taking position `n` up to the next multiple of `alignment`."""
    return bytes(-n % alignment)


def tensor_nbytes(shape: Sequence[int], ggml_type: int) -> int:
    """Bytes of a tensor's data from the gguf package's block table."""
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n = 1
    for d in shape:
        n *= d
    return n // block * type_size


def llama_shaped_tensors(
    n_layers: int = 42, width: int = 8192, ffn: int = 28672, vocab: int = 128256
) -> list[Tensor]:
    """A llama-like tensor table (Q4_K projections, Q6_K embedding and down projections).

    With the defaults it describes about 20.8 GB of data: for header-only
    sparse files (`write_gguf(..., sparse=True)`) that stand in for a big model.
    """
    tensors = [Tensor("token_embd.weight", (width, vocab), GGMLQuantizationType.Q6_K)]
    for i in range(n_layers):
        tensors += [
            Tensor(f"blk.{i}.attn_qkv.weight", (width, 3 * width), GGMLQuantizationType.Q4_K),
            Tensor(f"blk.{i}.attn_output.weight", (width, width), GGMLQuantizationType.Q4_K),
            Tensor(f"blk.{i}.ffn_up.weight", (width, ffn), GGMLQuantizationType.Q4_K),
            Tensor(f"blk.{i}.ffn_down.weight", (ffn, width), GGMLQuantizationType.Q6_K),
        ]
    return tensors


def _alignment(metadata: Mapping[str, MetadataValue]) -> int:
    v = metadata.get("general.alignment")
    return v[1] if v is not None and v[0] == GGUFValueType.UINT32 else DEFAULT_ALIGNMENT


def _layout(
    metadata: Mapping[str, MetadataValue], tensors: Sequence[Tensor]
) -> tuple[bytes, list[int]]:
    """Header bytes up to the data section (padded), and each tensor's relative offset."""
    alignment = _alignment(metadata)
    offsets, pos = [], 0
    for t in tensors:
        offset = pos + -pos % alignment if t.offset is None else t.offset
        offsets.append(offset)
        pos = offset + tensor_nbytes(t.shape, t.ggml_type)
    head = header(len(tensors), len(metadata))
    head += b"".join(kv(k, v) for k, v in metadata.items())
    head += b"".join(tensor_info(t.name, t.shape, t.ggml_type, o) for t, o in zip(tensors, offsets))
    return head + padding(len(head), alignment), offsets


def build_gguf(
    metadata: Mapping[str, MetadataValue],
    tensors: Sequence[Tensor] = (),
    *,
    with_data: bool = True,
) -> bytes:
    """A whole GGUF v3 file: header, metadata, tensor table, padding, then each tensor's data.

    Args:
        metadata: key -> `(type, value)` or `(GGUFValueType.ARRAY, element_type, values)`;
            a `general.alignment` u32 entry changes the alignment used for padding.
        tensors: the tensor table in file order.
        with_data: False stops after the header and its padding (the start of the data section).

    Returns:
        The file's bytes. Each tensor's data is padded to the alignment, as ggml's writer does.
    """
    head, offsets = _layout(metadata, tensors)
    if not with_data:
        return head
    body = bytearray()
    for t, offset in zip(tensors, offsets):
        body += bytes(
            max(0, offset - len(body))
        )  # an offset going backwards (a broken file) appends
        nbytes = tensor_nbytes(t.shape, t.ggml_type)
        body += t.data if t.data is not None else bytes(nbytes)
        body += padding(len(body), _alignment(metadata))
    return head + bytes(body)


def write_gguf(
    path: Path,
    metadata: Mapping[str, MetadataValue],
    tensors: Sequence[Tensor] = (),
    *,
    sparse: bool = False,
) -> Path:
    """Write `build_gguf(metadata, tensors)` to `path`.

    With `sparse=True` only the header is written and the file is extended to
    its full size with `truncate`, so the data section is a hole of zeros that
    takes no disk space: a header-only model of any size that still opens.
    """
    if not sparse:
        path.write_bytes(build_gguf(metadata, tensors))
        return path
    head, offsets = _layout(metadata, tensors)
    end = max(
        (o + tensor_nbytes(t.shape, t.ggml_type) for t, o in zip(tensors, offsets)), default=0
    )
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + end + -end % _alignment(metadata))
    return path


def rewrite_gguf(
    source: Path,
    target: Path,
    metadata: Mapping[str, MetadataValue | None] | None = None,
    tensor_data: Mapping[str, np.ndarray] | None = None,
    extra_tensors: Sequence[Tensor] = (),
) -> Path:
    """Write a copy of a GGUF file with some metadata keys replaced, added or dropped (value None),
    some tensors' data replaced (arrays of the stored type and size, e.g. float32 for F32)
    and `extra_tensors` appended to the tensor table.

    Every other key and tensor is read with the gguf package's own reader and written again as it was.
    """
    reader = GGUFReader(source)
    keys: dict[str, MetadataValue] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's own counts, written again by the builder
        kind = field.types[0]
        keys[key] = (kind, field.types[1], field.contents()) if kind == GGUFValueType.ARRAY else (kind, field.contents())
    for key, v in (metadata or {}).items():
        if v is None:
            keys.pop(key, None)
        else:
            keys[key] = v
    replaced = tensor_data or {}
    tensors = [
        Tensor(t.name, tuple(int(d) for d in t.shape), t.tensor_type,
               np.ascontiguousarray(replaced[t.name]).tobytes() if t.name in replaced else t.data.tobytes())
        for t in reader.tensors
    ]
    return write_gguf(target, keys, [*tensors, *extra_tensors])

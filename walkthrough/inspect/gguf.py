"""GGUF header reader over mmap: typed metadata, the tensor table, and lazy access to tensor bytes.

Why our own parser: `gguf.GGUFReader` decodes every array element into a numpy
object on open (about 25 s for a 152k-token vocabulary); this reader walks the
header once, validates every count against the bytes actually left, and only
*locates* large arrays (tokens, merges, scores), decoding them when asked.
Tensor data is never touched on open.

Big values are read lazily and within a budget, so memory follows what the file
really holds rather than what its length prefixes claim (a sparse file can claim
four 1 GiB strings in 20 KB): a string value longer than `EAGER_STRING_BYTES` is
only located on open (`MetadataField.scalar` is None), `get` reads it, or an
array, only when a consumer needs it, refusing with a `GGUFError` any one value
over `MAX_VALUE_BYTES` or reads adding up past `READ_BUDGET`; displays read a
bounded head with `string_head` and `array_head`, which never touch the rest.

The enums (`GGUFValueType`, `GGMLQuantizationType`), key names and the block
size table (`GGML_QUANT_SIZES`) come from the `gguf` package.

What is handled: versions 2 and 3, little-endian, split files
(`NAME-00001-of-00003.gguf`, opened together into one tensor table whichever
shard is named; the metadata is the first shard's, as gguf-split writes it).
What is refused, with a `GGUFError` naming the byte offset, key or tensor and
what to do: version 1, big-endian files, and every malformed count, length,
type, shape, alignment or offset listed in the tests (`tests/test_gguf_hostile.py`).
Every count is checked against the bytes left before anything is allocated or
looped over. Not checked: that tensor data is packed without gaps (ggml's own
loader insists on it; this reader only needs the data in order and in bounds,
except in a file cut short: only packed data marks a partial download, which
opens with `GGUFFile.missing` set), and metadata semantics (the model card's job).

Example:
    >>> f = open_gguf("model.gguf")
    >>> f.get("general.architecture")
    'qwen2moe'
    >>> f.tensors["blk.0.attn_q.weight"].shape   # ggml order: ne0 (row length) first
    (512, 512)
"""

from __future__ import annotations

import codecs
import gc
import mmap
import os
import re
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType, Keys
from gguf.gguf_reader import GGUFReader

from walkthrough.errors import WalkthroughError
from walkthrough.inspect import partial
from walkthrough.inspect.partial import MissingData
from walkthrough.units import exact_bytes

if TYPE_CHECKING:
    from typing_extensions import Self

MAX_STRING_BYTES = 1 << 30  # a key or string value longer than 1 GiB is refused
EAGER_STRING_BYTES = 1 << 16  # string values up to this are decoded on open; longer ones when asked for
MAX_VALUE_BYTES = 1 << 26  # `get` reads no value (string or array) over 64 MiB; real vocabularies take ~10 MB
READ_BUDGET = 1 << 28  # nor more than 256 MiB of values in all, per opened file
MAX_NAME_BYTES = 64  # ggml's GGML_MAX_NAME: a tensor name must be shorter than this
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
INT64_MAX = (1 << 63) - 1
HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, n_tensors, n_kv
MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, one key byte, value type, one value byte
MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 4 + 8  # name length, one name byte, n_dims, type, offset
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT in ggml's gguf.h
CORRUPT = "the file is damaged or was not written by a GGUF writer; download or convert it again"
CUT = "the download was probably interrupted; fetch the file again"
MAX_MISSING_NAMED = 5  # an error about missing shards names this many and counts the rest
SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

# Fixed-size metadata value types -> little-endian numpy dtype, from the gguf package's table.
_NUMPY_DTYPES: dict[GGUFValueType, np.dtype] = {
    t: np.dtype(np_type).newbyteorder("<") for t, np_type in GGUFReader.gguf_scalar_to_np.items()
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_DIMS = [struct.Struct(f"<{n}Q") for n in range(MAX_DIMS + 1)]  # a shape of n dimensions
_TYPE_OFFSET = struct.Struct("<IQ")  # a tensor's type, then its data offset
_TYPE_NAMES = {t: t.name for t in GGMLQuantizationType}
_BLOCKS = {int(t): (t, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


class GGUFError(WalkthroughError):
    """The file is not a GGUF this reader accepts; the message says where and why."""


@dataclass(frozen=True, slots=True)
class MetadataField:
    """One metadata key as stored: its type, where its value sits, and scalars decoded."""

    key: str
    type: GGUFValueType
    offset: int  # byte offset of the key's length prefix
    value_offset: int  # first byte of the value (for arrays: of the first element)
    end: int  # first byte after the value
    count: int = 1  # number of elements for arrays, 1 otherwise
    element_type: GGUFValueType | None = None  # arrays only
    scalar: Any = None  # decoded value for scalars and short strings; None for arrays and long strings

    @property
    def is_array(self) -> bool:
        return self.type == GGUFValueType.ARRAY

    @property
    def is_lazy(self) -> bool:
        """A string too long to decode on open: read it with `GGUFFile.get` or `string_head`."""
        return self.type == GGUFValueType.STRING and self.scalar is None

    @property
    def nbytes(self) -> int:
        """Bytes of the value in the file (of a string: its text, without the length prefix)."""
        return self.end - self.value_offset - (8 if self.type == GGUFValueType.STRING else 0)

    @property
    def type_name(self) -> str:
        """`uint32`, `string`, `array[string]`..."""
        if self.is_array:
            return f"array[{self.element_type.name.lower()}]"
        return self.type.name.lower()


class TensorInfo(NamedTuple):
    """One row of the tensor table (a named tuple: 300,000 of them are made in a blink)."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length (ne0)
    ggml_type: GGMLQuantizationType
    offset: int  # absolute byte offset of the data in its shard file
    nbytes: int
    shard: int = 0  # index into GGUFFile.paths
    info_offset: int = 0  # byte offset of this entry in the tensor table

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def np_shape(self) -> tuple[int, ...]:
        """numpy (row-major) order: the reverse of ggml's."""
        return tuple(reversed(self.shape))

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES[self.ggml_type]  # an enum's .name is a slow descriptor: 300,000 tensors felt it


@dataclass
class _Shard:
    path: Path
    size: int
    buf: Any  # the mmap.mmap of the whole file
    version: int
    alignment: int
    fields: dict[str, MetadataField]
    tensors: list[TensorInfo]
    header_end: int  # end of the tensor table (before padding)
    data_offset: int
    missing: MissingData | None = None  # a partial download's missing data (`inspect.partial`)


class _Cursor:
    """Reads little-endian values from a buffer, refusing to go past its end."""

    def __init__(self, buf, size: int, path: Path, offset: int = 0):
        self.buf, self.size, self.path, self.pos = buf, size, path, offset

    def fail(self, what: str, offset: int | None = None, hint: str = CORRUPT) -> GGUFError:
        at = self.pos if offset is None else offset
        return GGUFError(f"{self.path.name}: {what} (at byte {at}); {hint}")

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n > self.left():
            raise self.fail(
                f"{what} needs {n} bytes but only {self.left()} are left before the end of the file"
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def raw_string(
        self, what: str, limit: int = MAX_STRING_BYTES, why: str = "over the 1 GiB limit"
    ) -> bytes:
        """The bytes of a length-prefixed string, refused before copying if over `limit` or the bytes left."""
        n = self.string_length(what, limit, why)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def string_length(
        self, what: str, limit: int = MAX_STRING_BYTES, why: str = "over the 1 GiB limit"
    ) -> int:
        """Read a string's length prefix, refusing it over `limit` or the bytes left; the cursor stays on the text."""
        start = self.pos
        n = self.u64(f"length of {what}")
        if n > limit:
            raise self.fail(f"{what} claims {n} bytes, {why}", start)
        if n > self.left():
            raise self.fail(
                f"{what} claims {n} bytes but only {self.left()} are left in the file", start
            )
        return n

    def skip_strings(self, count: int, what: str) -> None:
        """Step over `count` strings, refusing any that runs past the end or over 1 GiB.

        The hot path (150k-token vocabularies) is a bare walk over the length
        prefixes; only if it runs off the end, or the array is so large that one
        element could exceed 1 GiB, does a checked walk find the culprit. Each
        step advances at least 8 bytes, so the walk is bounded by the file size.
        """
        unpack, buf, pos = _U64.unpack_from, self.buf, self.pos
        try:
            for _ in range(count):
                pos += 8 + unpack(buf, pos)[0]
        except (struct.error, OverflowError):  # a length prefix past the end of the buffer
            pos = self.size + 1
        if pos > self.size or pos - self.pos > MAX_STRING_BYTES:
            self._skip_strings_checked(count, what)
        self.pos = pos

    def _skip_strings_checked(self, count: int, what: str) -> None:
        """The slow walk: raise naming the first element cut by the end of the file or over 1 GiB."""
        unpack, buf, pos, end = _U64.unpack_from, self.buf, self.pos, self.size
        for i in range(count):
            if pos + 8 > end:
                raise self.fail(
                    f"{what}: element {i} of {count} is cut off by the end of the file", pos
                )
            (n,) = unpack(buf, pos)
            if n > MAX_STRING_BYTES:
                raise self.fail(f"{what}: element {i} claims {n} bytes, over the 1 GiB limit", pos)
            if pos + 8 + n > end:
                left = end - pos - 8
                raise self.fail(
                    f"{what}: element {i} claims {n} bytes, but only {left} are left in the file",
                    pos,
                )
            pos += 8 + n


def _value_type(raw: int, cursor: _Cursor, where: str, offset: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise cursor.fail(f"{where} has value type {raw}, outside 0-12", offset) from None


def _read_field(cursor: _Cursor, index: int) -> MetadataField:
    start = cursor.pos
    key_bytes = cursor.raw_string(f"key {index}")
    if not key_bytes:
        raise cursor.fail(f"metadata key {index} is empty", start)
    try:
        key = key_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise cursor.fail(
            f"metadata key {index} is not valid UTF-8: {key_bytes[:40]!r}", start
        ) from None
    type_offset = cursor.pos
    vtype = _value_type(cursor.u32(f"type of key {key!r}"), cursor, f"key {key!r}", type_offset)
    value_offset = cursor.pos
    if vtype == GGUFValueType.STRING:
        n = cursor.string_length(f"value of {key!r}")
        value = None  # a long string is located now and read when asked for
        if n <= EAGER_STRING_BYTES:
            value = cursor.buf[cursor.pos : cursor.pos + n].decode("utf-8", errors="replace")
        cursor.pos += n
        return MetadataField(key, vtype, start, value_offset, cursor.pos, scalar=value)
    if vtype != GGUFValueType.ARRAY:
        dtype = _NUMPY_DTYPES[vtype]
        cursor.need(dtype.itemsize, f"value of {key!r}")
        value = np.frombuffer(cursor.buf, dtype, 1, cursor.pos)[0].item()
        cursor.pos += dtype.itemsize
        return MetadataField(key, vtype, start, value_offset, cursor.pos, scalar=value)
    etype_offset = cursor.pos
    etype = _value_type(
        cursor.u32(f"element type of {key!r}"), cursor, f"array {key!r}", etype_offset
    )
    if etype == GGUFValueType.ARRAY:
        raise cursor.fail(
            f"array {key!r} holds arrays; nested arrays are not supported", etype_offset
        )
    count_offset = cursor.pos
    count = cursor.u64(f"element count of {key!r}")
    elem_min = 8 if etype == GGUFValueType.STRING else _NUMPY_DTYPES[etype].itemsize
    if count > cursor.left() // elem_min:
        raise cursor.fail(
            f"array {key!r} claims {count} elements of at least {elem_min} bytes, "
            f"but only {cursor.left()} bytes are left",
            count_offset,
        )
    first = cursor.pos
    if etype == GGUFValueType.STRING:
        cursor.skip_strings(count, f"array {key!r}")
    else:
        cursor.pos += count * elem_min
    return MetadataField(key, vtype, start, first, cursor.pos, count=count, element_type=etype)


def _read_tensor_info(
    cursor: _Cursor, index: int
) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int, int, int]:
    """One tensor table row: (name, shape in ggml order, type, relative data offset, nbytes, row offset)."""
    start = cursor.pos
    name_bytes = cursor.raw_string(
        f"name of tensor {index}",
        MAX_NAME_BYTES - 1,
        f"but ggml allows at most {MAX_NAME_BYTES - 1}",
    )
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise cursor.fail(
            f"tensor {index} name is not valid UTF-8: {name_bytes!r}", start
        ) from None
    if not name:
        raise cursor.fail(f"tensor {index} has an empty name", start)
    n_dims = cursor.u32(f"dimension count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        raise cursor.fail(
            f"tensor {name!r} has {n_dims} dimensions; ggml allows at most {MAX_DIMS}",
            cursor.pos - 4,
        )
    shape = tuple(cursor.u64(f"dimension of tensor {name!r}") for _ in range(n_dims))
    n = 1
    for d in shape:
        if d > INT64_MAX:
            raise cursor.fail(
                f"tensor {name!r} has a negative dimension ({d - (1 << 64)} as int64)", start
            )
        n *= d
        if n > INT64_MAX:
            raise cursor.fail(
                f"tensor {name!r} shape {list(shape)} has more than 2^63 elements (int64 overflow)",
                start,
            )
    type_offset = cursor.pos
    raw_type = cursor.u32(f"type of tensor {name!r}")
    try:
        ggml_type = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[ggml_type]
    except (ValueError, KeyError):
        raise cursor.fail(
            f"tensor {name!r} has unknown ggml type {raw_type}",
            type_offset,
            "the file is damaged, or newer than this program's gguf package: try upgrading gguf",
        ) from None
    row = shape[0] if shape else 1
    if row % block:
        raise cursor.fail(
            f"tensor {name!r} ({ggml_type.name}) has rows of {row} elements, "
            f"not a multiple of the block size {block}",
            start,
        )
    nbytes = n // block * type_size
    if nbytes > INT64_MAX:
        raise cursor.fail(
            f"tensor {name!r} shape {list(shape)} needs {nbytes} bytes, more than 2^63", start
        )
    offset = cursor.u64(f"data offset of tensor {name!r}")
    return name, shape, ggml_type, offset, nbytes, start


def _read_tensor_table(cursor: _Cursor, n_tensors: int) -> list[tuple]:
    """Every row of the tensor table, as `_read_tensor_info` gives them.

    The hot path (300,000 tensors take well under a second) reads each row with a few bulk
    unpacks and checks it in place; at the first row it cannot accept, it hands over to the
    row-by-row reader, which raises the error naming what is wrong and where.
    """
    start = cursor.pos
    rows = _fast_tensor_table(cursor.buf, start, cursor.size, n_tensors)
    if rows is None:
        return [_read_tensor_info(cursor, i) for i in range(n_tensors)]
    cursor.pos = rows.pop()
    return rows


def _fast_tensor_table(buf, pos: int, size: int, n_tensors: int) -> list | None:
    """The rows and, last, the position after the table; None if any row needs the checked reader."""
    unpack_len, unpack_dims, unpack_tail, blocks = _U64.unpack_from, _DIMS, _TYPE_OFFSET.unpack_from, _BLOCKS
    rows: list = []
    append = rows.append
    try:
        for _ in range(n_tensors):
            start = pos
            (n,) = unpack_len(buf, pos)
            if not 0 < n < MAX_NAME_BYTES:
                return None
            name = buf[pos + 8 : pos + 8 + n].decode("utf-8")
            pos += 8 + n
            (n_dims,) = _U32.unpack_from(buf, pos)
            if n_dims > MAX_DIMS:
                return None
            shape = unpack_dims[n_dims].unpack_from(buf, pos + 4)
            pos += 4 + 8 * n_dims
            raw_type, offset = unpack_tail(buf, pos)
            pos += 12
            ggml_type, block, type_size = blocks[raw_type]
            count = 1
            for d in shape:
                count *= d
            if count > INT64_MAX or (shape[0] if shape else 1) % block or any(d > INT64_MAX for d in shape):
                return None
            nbytes = count // block * type_size
            if nbytes > INT64_MAX:
                return None
            append((name, shape, ggml_type, offset, nbytes, start))
    except (struct.error, UnicodeDecodeError, KeyError):
        return None
    if pos > size:
        return None
    append(pos)
    return rows


def _open_buffer(path: Path):
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise GGUFError(
            f"{path.name}: {size} bytes is too short to be a GGUF file (the fixed header alone is "
            f"{HEADER_BYTES} bytes); {CUT}"
        )
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return buf, size


def _check_magic_and_version(cursor: _Cursor) -> int:
    magic = bytes(cursor.buf[0:4])
    if magic != struct.pack("<I", GGUF_MAGIC):
        if magic in (b"ggml", b"ggmf", b"ggjt", b"lmgg", b"fmgg", b"tjgg"):
            raise cursor.fail(
                "this is a pre-GGUF (GGML/GGJT) model file", 0, "convert it to GGUF with llama.cpp"
            )
        raise cursor.fail(
            f"not a GGUF file: magic is {magic!r}, expected b'GGUF'", 0, "open a .gguf model file"
        )
    cursor.pos = 4
    version = cursor.u32("version")
    if version not in (2, 3):
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        if swapped in (1, 2, 3):
            raise cursor.fail(
                f"this GGUF is big-endian (version reads as {version}, byte-swapped {swapped}); "
                "only little-endian files are supported",
                4,
                "convert it with the gguf package's gguf_convert_endian script",
            )
        if version == 1:
            raise cursor.fail(
                "GGUF version 1 is not supported (only 2 and 3)",
                4,
                "re-convert the model with a current llama.cpp",
            )
        raise cursor.fail(f"GGUF version {version} is not supported (only 2 and 3)", 4)
    return version


def _alignment(fields: dict[str, MetadataField], cursor: _Cursor) -> int:
    field = fields.get(Keys.General.ALIGNMENT)
    if field is None:
        return DEFAULT_ALIGNMENT
    if field.type != GGUFValueType.UINT32:
        raise cursor.fail(
            f"{Keys.General.ALIGNMENT} must be a uint32, not {field.type_name}", field.offset
        )
    a = field.scalar
    if a == 0 or a & (a - 1):
        raise cursor.fail(
            f"{Keys.General.ALIGNMENT} is {a}; it must be a non-zero power of two", field.offset
        )
    return a


def _parse_shard(path: Path) -> _Shard:
    buf, size = _open_buffer(path)
    cursor = _Cursor(buf, size, path)
    version = _check_magic_and_version(cursor)
    n_tensors = cursor.u64("tensor count")
    n_kv = cursor.u64("metadata key count")
    left = cursor.left()
    if n_tensors > left // MIN_TENSOR_INFO_BYTES:
        raise cursor.fail(
            f"the header claims {n_tensors} tensors, more than the {left} bytes after it could hold "
            f"(each needs at least {MIN_TENSOR_INFO_BYTES})",
            8,
        )
    if n_kv > (left - n_tensors * MIN_TENSOR_INFO_BYTES) // MIN_KV_BYTES:
        raise cursor.fail(
            f"the header claims {n_kv} metadata keys (and {n_tensors} tensors), more than the {left} bytes "
            f"after it could hold (each key needs at least {MIN_KV_BYTES})",
            16,
        )

    fields: dict[str, MetadataField] = {}
    for i in range(n_kv):
        field = _read_field(cursor, i)
        if field.key in fields:
            raise cursor.fail(f"metadata key {field.key!r} appears twice", field.offset)
        fields[field.key] = field
    alignment = _alignment(fields, cursor)

    raw_infos = _read_tensor_table(cursor, n_tensors)
    header_end = cursor.pos
    data_offset = -(-header_end // alignment) * alignment
    tensors = _place_tensors(raw_infos, cursor, alignment, data_offset)
    missing = _check_data_in_file(tensors, cursor, alignment, data_offset)
    return _Shard(path, size, buf, version, alignment, fields, tensors, header_end, data_offset, missing)


def _place_tensors(
    raw_infos, cursor: _Cursor, alignment: int, data_offset: int
) -> list[TensorInfo]:
    """Check names, alignment, order and bounds of the data; return TensorInfos with absolute offsets."""
    seen: set[str] = set()
    tensors: list[TensorInfo] = []
    prev_name, prev_offset, prev_end = None, -1, -1  # the previous row's name, relative offset and end
    for name, shape, ggml_type, rel_offset, nbytes, info_offset in raw_infos:
        if name in seen:
            raise cursor.fail(
                f"tensor name {name!r} appears twice in the tensor table", info_offset
            )
        seen.add(name)
        if rel_offset % alignment:
            raise cursor.fail(
                f"tensor {name!r} data offset {rel_offset} is misaligned: not a multiple of the alignment {alignment}",
                info_offset,
            )
        if rel_offset < prev_offset:
            raise cursor.fail(
                f"tensor {name!r} data offset {rel_offset} is out of order: it comes before that of "
                f"{prev_name!r} ({prev_offset}); offsets must increase",
                info_offset,
            )
        if rel_offset < prev_end:
            raise cursor.fail(
                f"tensor {name!r} data (offset {rel_offset}) overlaps {prev_name!r}, which ends at {prev_end}",
                info_offset,
            )
        tensors.append(TensorInfo(name, shape, ggml_type, data_offset + rel_offset, nbytes, 0, info_offset))
        prev_name, prev_offset, prev_end = name, rel_offset, rel_offset + nbytes
    return tensors


def _check_data_in_file(
    tensors: list[TensorInfo], cursor: _Cursor, alignment: int, data_offset: int
) -> MissingData | None:
    """What a file shorter than its (ordered) tensor table lacks, or None when all its data is there.

    A cut file whose tensors are packed as every GGUF writer packs them (each at the previous one's end,
    rounded up to the alignment) is a partial download: it opens, and the record says what is missing.
    Any other file whose data runs past its end is refused as damaged, naming the first tensor not in it.
    """
    size = cursor.size
    for i, t in enumerate(tensors):
        if t.offset + t.nbytes <= size:
            continue
        last = tensors[-1]
        if _packed(tensors, alignment, data_offset):
            return MissingData(last.offset + last.nbytes - size, sum(x.nbytes for x in tensors),
                               tuple(x.name for x in tensors[i:]), len(tensors), t.offset < size)
        short = f"the file is {exact_bytes(last.offset + last.nbytes - size)} shorter than its tensor table says"
        if t.offset > size:
            raise cursor.fail(
                f"tensor {t.name!r} data starts at byte {t.offset:,}, past the end of the file "
                f"({exact_bytes(size)}); {short}",
                t.info_offset,
                "the file is cut or its tensor table is corrupt; download it again",
            )
        after = len(tensors) - i - 1
        more = f"; the {after} tensor(s) after it are missing entirely" if after else ""
        raise cursor.fail(
            f"{short}: tensor {t.name!r} is cut, {t.offset + t.nbytes - size:,} of its {exact_bytes(t.nbytes)} "
            f"are missing{more}",
            size,
            CUT,
        )
    return None


def _packed(tensors: list[TensorInfo], alignment: int, data_offset: int) -> bool:
    """Whether each tensor starts where a GGUF writer puts it: the previous one's end, rounded up to the
    alignment (gguf-py's GGUFWriter, ggml's gguf_add_tensor), the first at the start of the data."""
    expected = data_offset
    for t in tensors:
        if t.offset != expected:
            return False
        end = t.offset + t.nbytes
        expected = end + -end % alignment
    return True


def _decode_strings(buf, field: MetadataField) -> list[str]:
    """The elements of a string array (bounds were checked on open); invalid UTF-8 is replaced.

    One Python step per element (tests/bench/bench_gguf_open.py prints the time).
    Copying the array out of the mapping first, bulk-decoding it with numpy and
    decoding strictly first were measured too, and were no faster.
    """
    unpack, pos, out = _U64.unpack_from, field.value_offset, []
    append = out.append
    for _ in range(field.count):
        n = unpack(buf, pos)[0]
        pos += 8
        append(buf[pos : pos + n].decode("utf-8", errors="replace"))
        pos += n
    return out


def _decode_array(buf, field: MetadataField):
    """numpy array for numeric arrays, list[str] for string arrays (invalid UTF-8 replaced)."""
    if field.element_type == GGUFValueType.STRING:
        return _decode_strings(buf, field)
    dtype = _NUMPY_DTYPES[field.element_type]
    return np.frombuffer(buf, dtype=dtype, count=field.count, offset=field.value_offset)


def shard_name(prefix: str, number: int, count: int) -> str:
    """File name of shard `number` (1-based) of `count`, as llama.cpp's llama_split_path writes it."""
    return f"{prefix}-{number:05d}-of-{count:05d}.gguf"


def split_name_parts(name: str) -> tuple[str, int, int] | None:
    """(prefix, shard number, shard count) of a shard's file name; None for any other name.

    Example: `Qwen-Q4-00002-of-00003.gguf` -> ("Qwen-Q4", 2, 3); `x-00003-of-00002.gguf` -> None.
    """
    match = SPLIT_NAME.match(name)
    if match is None:
        return None
    number, count = int(match["no"]), int(match["count"])
    return (match["prefix"], number, count) if 1 <= number <= count else None


def shard_paths(path: Path) -> list[Path]:
    """Every shard of the split model `path` belongs to, in order, or `[path]` for a single file.

    Split models are recognised by name, as llama.cpp writes them:
    `NAME-00002-of-00003.gguf` -> `NAME-00001-of-00003.gguf` ... `NAME-00003-of-00003.gguf`
    (see `split_name_parts`).

    Raises:
        GGUFError: a shard is missing (the message names every missing shard).
    """
    parts = split_name_parts(path.name)
    if parts is None:
        return [path]
    prefix, _, n = parts
    paths = [path.with_name(shard_name(prefix, i, n)) for i in range(1, n + 1)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        named = ", ".join(missing[:MAX_MISSING_NAMED])
        if len(missing) > MAX_MISSING_NAMED:
            named = f"{len(missing):,} of {n:,} shards are missing ({named}, ...)"
        else:
            named = f"shard {named} is missing"
        raise GGUFError(
            f"split model {path.name}: {named} from {path.parent}; download all {n:,} shards into one folder"
        )
    return paths


def _int_key(shard: _Shard, key: str) -> int | None:
    """An integer metadata value of a shard, None if absent; refused if present with another type."""
    field = shard.fields.get(key)
    if field is None:
        return None
    if field.is_array or field.type == GGUFValueType.STRING or isinstance(field.scalar, (float, bool)):
        raise GGUFError(
            f"{shard.path.name}: {key} must be an integer, not {field.type_name}; {CORRUPT}"
        )
    return field.scalar


def _check_split(shards: list[_Shard]) -> None:
    """The split keys (gguf-split writes split.no, split.count, split.tensors.count in every shard) agree."""
    n = len(shards)
    first = shards[0]
    count = _int_key(first, Keys.Split.LLM_KV_SPLIT_COUNT)
    if n == 1:
        if count is not None and count > 1:
            raise GGUFError(
                f"{first.path.name}: the file says it is one of {count} splits, but its name does not "
                f"follow NAME-00001-of-{count:05d}.gguf; rename the shards as llama.cpp's gguf-split named them"
            )
        return
    for index, shard in enumerate(shards):
        name = shard.path.name
        no = _int_key(shard, Keys.Split.LLM_KV_SPLIT_NO)
        shard_count = _int_key(shard, Keys.Split.LLM_KV_SPLIT_COUNT)
        if shard_count != n:
            raise GGUFError(
                f"split model {name}: the name says {n} shards but {Keys.Split.LLM_KV_SPLIT_COUNT} "
                f"says {shard_count}; {CORRUPT}"
            )
        if no != index:
            raise GGUFError(
                f"split model {name}: {Keys.Split.LLM_KV_SPLIT_NO} is {no}, expected {index} for shard "
                f"{index + 1} of {n}; the shards come from different models, download them again"
            )
    total = _int_key(first, Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT)
    found = sum(len(s.tensors) for s in shards)
    if total is not None and total != found:
        raise GGUFError(
            f"split model {first.path.name}: {Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT} says {total} tensors "
            f"but the {n} shards hold {found}; {CORRUPT}"
        )


class GGUFFile:
    """An opened GGUF (one file or all shards of a split model)."""

    def __init__(self, shards: list[_Shard]):
        self._shards = shards
        first = shards[0]
        self.path: Path = first.path
        self.paths: list[Path] = [s.path for s in shards]
        self.version: int = first.version
        self.alignment: int = first.alignment
        self.fields: dict[str, MetadataField] = first.fields
        self.tensors: dict[str, TensorInfo] = {}
        for index, shard in enumerate(shards):
            for t in shard.tensors:
                if t.name in self.tensors:
                    raise GGUFError(
                        f"split model {self.path.name}: tensor {t.name!r} appears in two shards "
                        f"({self.paths[self.tensors[t.name].shard].name} and {shard.path.name}); {CORRUPT}"
                    )
                self.tensors[t.name] = t if index == 0 else TensorInfo(
                    t.name, t.shape, t.ggml_type, t.offset, t.nbytes, index, t.info_offset
                )
        self.missing: MissingData | None = partial.merge([s.missing for s in shards], len(self.tensors),
                                                         self.data_bytes)
        self._absent = frozenset(self.missing.tensors) if self.missing else frozenset()
        self._decoded: dict[str, Any] = {}
        self._read = 0  # bytes of lazy values read so far, against READ_BUDGET

    # ---- sizes and layout -------------------------------------------------
    @property
    def file_size(self) -> int:
        """Bytes on disk over all shards."""
        return sum(s.size for s in self._shards)

    @property
    def header_bytes(self) -> int:
        """Bytes before the tensor data (header, metadata, tensor table, padding), over all shards."""
        return sum(min(s.data_offset, s.size) for s in self._shards)  # no tensors: may end unpadded

    @property
    def data_bytes(self) -> int:
        """Bytes of tensor data the tensor table describes (on disk or, for a partial download, not)."""
        return sum(t.nbytes for t in self.tensors.values())

    def layout(self) -> dict[str, int]:
        """Bytes per region of the first shard: fixed header, metadata, tensor table, padding, data."""
        s = self._shards[0]
        meta_end = max((f.end for f in s.fields.values()), default=HEADER_BYTES)
        data_start = min(s.data_offset, s.size)  # a file without tensors may end before its padding
        return {
            "header": HEADER_BYTES,
            "metadata": meta_end - HEADER_BYTES,
            "tensor_table": s.header_end - meta_end,
            "padding": data_start - s.header_end,
            "data": s.size - data_start,
        }

    # ---- metadata ------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        return key in self.fields

    def get(self, key: str, default: Any = None) -> Any:
        """The value of a metadata key: scalars as Python values, long strings and arrays read on first use.

        Raises:
            GGUFError: the value is over `MAX_VALUE_BYTES`, or reading it would take this file's
                reads past `READ_BUDGET`.
        """
        field = self.fields.get(key)
        if field is None:
            return default
        if not field.is_array and not field.is_lazy:
            return field.scalar
        if key not in self._decoded:
            self._charge(field)
            buf = self._shards[0].buf
            if field.is_lazy:
                start = field.value_offset + 8
                self._decoded[key] = buf[start : field.end].decode("utf-8", errors="replace")
            else:
                self._decoded[key] = _decode_array(buf, field)
        return self._decoded[key]

    def too_big(self, key: str) -> str | None:
        """Why `get(key)` would refuse the value (over `MAX_VALUE_BYTES`), or None."""
        field = self.fields[key]
        if field.nbytes > MAX_VALUE_BYTES:
            return (f"{key} holds {field.nbytes:,} bytes, over the {MAX_VALUE_BYTES >> 20} MiB "
                    "this program reads for one value")
        return None

    def _charge(self, field: MetadataField) -> None:
        """Count a lazy read against the budget, or refuse it."""
        where = f"{self.path.name}: "
        why = self.too_big(field.key)
        if why is None and self._read + field.nbytes > READ_BUDGET:
            why = (f"reading {field.key} ({field.nbytes:,} bytes) would take the values read from this file "
                   f"past {READ_BUDGET >> 20} MiB")
        if why is not None:
            raise GGUFError(f"{where}{why} (at byte {field.offset}); {CORRUPT}")
        self._read += field.nbytes

    def string_head(self, key: str, max_bytes: int) -> tuple[str, bool]:
        """The first `max_bytes` bytes of a string value, decoded, and whether it was cut; the rest is not read."""
        field = self.fields[key]
        start = field.value_offset + 8
        cut = field.nbytes > max_bytes
        head = self._shards[0].buf[start : start + min(field.nbytes, max_bytes)]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(head, final=not cut), cut  # a character cut in two is left out

    def short_text(self, key: str, max_bytes: int) -> str | None:
        """A string value for a title or a name check: cut after `max_bytes` (marked "…"); None when
        the key is absent or not a string."""
        field = self.fields.get(key)
        if field is None or field.type != GGUFValueType.STRING:
            return None
        head, cut = self.string_head(key, max_bytes)
        return head + "…" if cut else head

    def array_head(self, key: str, n: int) -> list[Any]:
        """The first n elements of a numeric array as Python values; the rest is not read."""
        field = self.fields[key]
        dtype = _NUMPY_DTYPES[field.element_type]
        return np.frombuffer(self._shards[0].buf, dtype, min(n, field.count), field.value_offset).tolist()

    # ---- tensor data -----------------------------------------------------------
    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw stored bytes of a tensor, as a read-only uint8 view of the mapped file.

        Raises:
            GGUFError: the file is a partial download without this tensor's data (`missing`).
        """
        t = self.tensors[name]
        if name in self._absent:
            raise GGUFError(f"{self.path.name}: {self.missing.tensor_refusal(name)}")
        return np.frombuffer(
            self._shards[t.shard].buf, dtype=np.uint8, count=t.nbytes, offset=t.offset
        )

    def require_whole(self, what: str) -> None:
        """Refuse a partial download for `what` (e.g. "the numpy engine"), which reads the weights.

        Raises:
            GGUFError: some tensor data is missing; the message says how much, which, and what to do.
        """
        if self.missing is not None:
            raise GGUFError(f"{self.path.name}: {self.missing.refusal(what)}")

    def close(self) -> None:
        """Drop the mappings (views handed out keep theirs alive until they go)."""
        for s in self._shards:
            try:
                s.buf.close()
            except (BufferError, AttributeError):
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open and validate a GGUF file (any shard of a split model opens all of them).

    Only the headers are read; tensor data stays on disk until `tensor_bytes` is used. A partial download
    (data cut short, header whole) opens with `missing` saying what it lacks (`inspect.partial`).

    Raises:
        GGUFError: the file is not a valid GGUF; the message says what and where.
        OSError: the file cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        raise GGUFError(f"{path} is a folder; name a .gguf file inside it")
    with _collector_paused():
        shards = [_parse_shard(p) for p in shard_paths(path)]
        _check_split(shards)
        return GGUFFile(shards)


@contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector while the tables are built.

    Each tensor makes a few objects, none in a cycle; with the collector on, the
    300,000 tensors of issue 20's file set off collections that walk every object
    made so far, which took about as long as the parsing itself.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

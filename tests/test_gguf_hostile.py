"""Hostile-input tests for the GGUF reader: a corpus of malformed files built byte by byte.

Each broken file must be refused with a `GGUFError` whose one-line message
names the problem, without a traceback of another type and without a large
allocation (checked with tracemalloc: the corpus files are tiny, so any big
allocation could only come from trusting a count read from the file).
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf_builder import (
    Tensor,
    array,
    build_gguf,
    header,
    kv,
    padding,
    string,
    tensor_info,
    tensor_nbytes,
    u32,
    u64,
    write_gguf,
)

from walkthrough.inspect.gguf import GGUFError, open_gguf
from walkthrough.units import exact_bytes

V = GGUFValueType
Q = GGMLQuantizationType
MAX_ALLOCATION = 1 << 20  # bytes of Python allocation allowed while refusing a tiny file

ARCH = kv("general.architecture", (V.STRING, "llama"))


def write(tmp_path: Path, blob: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(blob)
    return path


def refused(tmp_path: Path, blob: bytes, *words: str) -> str:
    """Open `blob` as a file; it must raise GGUFError naming every word; return the message."""
    path = write(tmp_path, blob)
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError) as info:
            open_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(path.name)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert peak < MAX_ALLOCATION, f"refusing a {len(blob)}-byte file allocated {peak} bytes"
    return message


def one_tensor_file(name: str | bytes, shape, ggml_type: int = Q.F32, offset: int = 0) -> bytes:
    """A file with one tensor row written by hand (data zeros, sized from the builder's table)."""
    head = header(1, 1) + ARCH + tensor_info(name, shape, ggml_type, offset)
    return head + padding(len(head)) + bytes(1024)


# ---- the fixed header -----------------------------------------------------------------


def test_empty_file(tmp_path):
    refused(tmp_path, b"", "0 bytes", "too short")


def test_short_file(tmp_path):
    refused(tmp_path, header(0, 0)[:10], "10 bytes", "too short")


def test_bad_magic(tmp_path):
    refused(tmp_path, b"GGUX" + header(0, 0)[4:], "magic", "not a GGUF")


def test_pre_gguf_magic(tmp_path):
    refused(tmp_path, b"tjgg" + header(0, 0)[4:], "pre-GGUF", "convert")


@pytest.mark.parametrize("version", [0, 1, 4, 0x7FFF])
def test_unsupported_version(tmp_path, version):
    message = refused(
        tmp_path, header(0, 0, version=version), f"version {version}", "not supported"
    )
    if version == 1:
        assert "re-convert" in message


def test_byte_swapped_version(tmp_path):
    blob = b"GGUF" + struct.pack(">I", 3) + struct.pack(">Q", 0) * 2
    refused(tmp_path, blob, "big-endian", "gguf_convert_endian")


def test_tensor_count_larger_than_file(tmp_path):
    refused(tmp_path, header(1 << 40, 0) + bytes(64), "1099511627776 tensors", "could hold")


def test_key_count_larger_than_file(tmp_path):
    refused(tmp_path, header(0, 1 << 62) + bytes(64), "metadata keys", "could hold")


def test_key_count_one_more_than_present(tmp_path):
    refused(tmp_path, header(0, 2) + ARCH, "key 1", "left")


# ---- metadata keys and values -----------------------------------------------------------


def test_key_length_larger_than_bytes_left(tmp_path):
    blob = header(0, 1) + string("general.name", length=1000) + u32(V.UINT8) + b"\x01"
    refused(tmp_path, blob, "key 0 claims 1000 bytes", "left")


def test_key_length_over_one_gib(tmp_path):
    blob = header(0, 1) + string("general.name", length=(1 << 30) + 1) + u32(V.UINT8) + b"\x01"
    refused(tmp_path, blob, "1 GiB")


def test_string_value_length_larger_than_bytes_left(tmp_path):
    blob = header(0, 1) + string("general.name") + u32(V.STRING) + string("abc", length=500)
    refused(tmp_path, blob, "'general.name'", "500 bytes", "left")


def test_string_value_over_one_gib(tmp_path):
    blob = header(0, 1) + string("general.name") + u32(V.STRING) + string("abc", length=1 << 40)
    refused(tmp_path, blob, "'general.name'", "1 GiB")


def test_empty_key(tmp_path):
    refused(tmp_path, header(0, 1) + kv("", (V.STRING, "value")), "key 0 is empty")


def test_duplicate_key(tmp_path):
    blob = header(0, 2) + ARCH + kv("general.architecture", (V.STRING, "qwen2"))
    refused(tmp_path, blob, "'general.architecture'", "twice")


def test_invalid_key_utf8(tmp_path):
    refused(tmp_path, header(0, 1) + kv(b"general.\xff\xfe", (V.UINT8, 1)), "key 0", "UTF-8")


@pytest.mark.parametrize("vtype", [13, 255, 0xFFFFFFFF])
def test_value_type_outside_range(tmp_path, vtype):
    blob = header(0, 1) + string("general.x") + u32(vtype) + bytes(16)
    key_type_at = len(header(0, 1) + string("general.x"))
    refused(tmp_path, blob, f"value type {vtype}", "0-12", "'general.x'", f"byte {key_type_at}")


@pytest.mark.parametrize("etype", [13, 1000])
def test_array_element_type_invalid(tmp_path, etype):
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(etype) + u64(1) + bytes(16)
    refused(tmp_path, blob, f"value type {etype}", "'a.list'")


def test_array_of_arrays(tmp_path):
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(V.ARRAY) + u64(1) + bytes(32)
    refused(tmp_path, blob, "'a.list'", "nested arrays")


def test_array_count_larger_than_bytes_left(tmp_path):
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(V.UINT32) + u64(1 << 61) + bytes(64)
    refused(tmp_path, blob, "'a.list'", str(1 << 61), "64 bytes are left")


def test_string_array_counts_eight_bytes_per_element(tmp_path):
    # 64 bytes follow: room for 64 one-byte elements, but not for 9 strings (8 bytes each at least).
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(V.STRING) + u64(9) + bytes(64)
    refused(tmp_path, blob, "'a.list'", "9 elements of at least 8 bytes")


def test_string_array_element_longer_than_bytes_left(tmp_path):
    elements = string("ok") + string("liar", length=1000)
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(V.STRING) + u64(2) + elements
    refused(tmp_path, blob, "'a.list'", "element 1 claims 1000 bytes")


def test_string_array_element_over_one_gib(tmp_path):
    elements = string("liar", length=1 << 31) + bytes(16)
    blob = header(0, 1) + string("a.list") + u32(V.ARRAY) + u32(V.STRING) + u64(2) + elements
    refused(tmp_path, blob, "'a.list'", "element 0", "1 GiB")


def _sparse_string_array(path: Path, lengths: list[int]) -> Path:
    """A file whose one key is a string array with elements of these lengths, their bytes holes."""
    with open(path, "wb") as fh:
        fh.write(header(0, 1) + string("a.big") + u32(V.ARRAY) + u32(V.STRING) + u64(len(lengths)))
        for n in lengths:
            fh.write(u64(n))
            fh.seek(n, 1)
        fh.truncate()  # extend the file to the end of the last element, as a hole
    return path


def test_string_array_over_one_gib_in_total_opens(tmp_path):
    path = _sparse_string_array(tmp_path / "big.gguf", [600 << 20, 600 << 20])
    field = open_gguf(path).fields["a.big"]
    assert field.count == 2 and field.end == path.stat().st_size


def test_string_array_element_over_one_gib_in_a_big_file(tmp_path):
    path = _sparse_string_array(tmp_path / "big.gguf", [1, (1 << 30) + 1])
    with pytest.raises(
        GGUFError, match=r"'a\.big': element 1 claims 1073741825 bytes, over the 1 GiB"
    ):
        open_gguf(path)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ((V.UINT64, 32), ("must be a uint32", "uint64")),
        ((V.STRING, "32"), ("must be a uint32", "string")),
        ((V.UINT32, 0), ("is 0", "power of two")),
        ((V.UINT32, 48), ("is 48", "power of two")),
    ],
)
def test_bad_alignment(tmp_path, value, words):
    refused(tmp_path, header(0, 1) + kv("general.alignment", value), "general.alignment", *words)


# ---- the tensor table -----------------------------------------------------------------


def test_tensor_name_of_64_bytes(tmp_path):
    refused(tmp_path, one_tensor_file("n" * 64, (8,)), "64 bytes", "at most 63")


def test_tensor_name_of_63_bytes_is_accepted(tmp_path):
    f = open_gguf(write(tmp_path, one_tensor_file("n" * 63, (8,))))
    assert list(f.tensors) == ["n" * 63]


def test_tensor_name_huge_is_refused_before_reading(tmp_path):
    blob = header(1, 0) + string("w", length=1 << 40) + bytes(64)
    refused(tmp_path, blob, "tensor 0", str(1 << 40), "at most 63")


@pytest.mark.parametrize(
    ("name", "words"), [(b"", ("tensor 0", "empty name")), (b"w\xff", ("tensor 0", "UTF-8"))]
)
def test_bad_tensor_name(tmp_path, name, words):
    refused(tmp_path, one_tensor_file(name, (8,)), *words)


def test_duplicate_tensor_name(tmp_path):
    blob = build_gguf({}, [Tensor("w", (8,)), Tensor("w", (8,))])
    refused(tmp_path, blob, "'w'", "twice")


def test_duplicate_tensor_name_is_shown_escaped(tmp_path):
    name = "\x1b[31mred"
    message = refused(tmp_path, build_gguf({}, [Tensor(name, (8,)), Tensor(name, (8,))]), "twice")
    assert "\x1b" not in message and "\\x1b" in message


def test_more_than_four_dimensions(tmp_path):
    refused(tmp_path, one_tensor_file("w", (1, 1, 1, 1, 1)), "'w'", "5 dimensions", "at most 4")


def test_dimension_product_overflows_int64(tmp_path):
    refused(tmp_path, one_tensor_file("w", (1 << 32, 1 << 32)), "'w'", "2^63", "overflow")


def test_negative_dimension(tmp_path):
    refused(tmp_path, one_tensor_file("w", (8, (1 << 64) - 2)), "'w'", "negative", "-2")


def test_byte_size_overflows_int64(tmp_path):
    # 2^62 elements fit in int64, but at 4 bytes each the data would not.
    refused(tmp_path, one_tensor_file("w", (1 << 31, 1 << 31)), "'w'", "bytes, more than 2^63")


@pytest.mark.parametrize("ggml_type", [4, 5, 99, 0xFFFFFFFF])
def test_unknown_ggml_type(tmp_path, ggml_type):
    refused(
        tmp_path, one_tensor_file("w", (32,), ggml_type), "'w'", f"unknown ggml type {ggml_type}"
    )


@pytest.mark.parametrize("ggml_type", [Q.Q8_0, Q.Q4_K])
def test_row_not_a_multiple_of_block_size(tmp_path, ggml_type):
    block = GGML_QUANT_SIZES[ggml_type][0]
    blob = one_tensor_file("w", (block + 1, 2), ggml_type)
    refused(tmp_path, blob, "'w'", ggml_type.name, f"rows of {block + 1}", f"block size {block}")


def test_block_type_scalar_is_a_row_of_one(tmp_path):
    refused(tmp_path, one_tensor_file("w", (), Q.Q8_0), "'w'", "rows of 1")


def test_tensor_offset_misaligned(tmp_path):
    refused(tmp_path, build_gguf({}, [Tensor("w", (8,), offset=4)]), "'w'", "misaligned", "32")


def test_tensor_offsets_out_of_order(tmp_path):
    blob = build_gguf({}, [Tensor("a", (8,), offset=64), Tensor("b", (8,), offset=0)])
    refused(tmp_path, blob, "'b'", "'a'", "out of order")


def test_tensor_data_overlapping(tmp_path):
    blob = build_gguf({}, [Tensor("a", (32,), offset=0), Tensor("b", (8,), offset=96)])
    refused(tmp_path, blob, "'b'", "overlaps 'a'", "ends at 128")


def test_tensor_offset_past_end_of_file(tmp_path):
    blob = build_gguf({}, [Tensor("w", (8,), offset=1 << 40)], with_data=False)
    refused(tmp_path, blob, "'w'", "past the end of the file", f"({len(blob):,} bytes)")


def test_custom_alignment_governs_offsets(tmp_path):
    meta = {"general.alignment": (V.UINT32, 64)}
    refused(tmp_path, build_gguf(meta, [Tensor("w", (8,), offset=32)]), "misaligned", "64")
    f = open_gguf(
        write(tmp_path, build_gguf(meta, [Tensor("a", (8,)), Tensor("b", (8,))]), "ok.gguf")
    )
    assert f.alignment == 64
    assert [t.offset % 64 for t in f.tensors.values()] == [0, 0]


# ---- a file cut short -------------------------------------------------------------------


def _two_tensor_file(gap: int = 0) -> tuple[bytes, int, int, int]:
    """A valid file with tensors 'a' (1001 F32, so padding follows it) and 'b' (512 F32), `gap` bytes
    (a multiple of 32) more than the padding between them.

    Returns the bytes and the absolute positions where 'a' ends, 'b' starts and 'b' ends.
    """
    metadata = {"general.name": (V.STRING, "cut")}
    b_offset = 4 * 1001 + -(4 * 1001) % 32 + gap
    tensors = [Tensor("a", (1001,)), Tensor("b", (512,), offset=b_offset)]
    data_start = len(build_gguf(metadata, tensors, with_data=False))
    a_end = data_start + 4 * 1001
    b_start = data_start + b_offset
    return build_gguf(metadata, tensors), a_end, b_start, b_start + 4 * 512


def partial(tmp_path: Path, blob: bytes):
    """Open a file cut after its header: it opens, with `missing` set; return the file."""
    f = open_gguf(write(tmp_path, blob))
    assert f.missing is not None
    return f


def test_file_cut_inside_the_last_tensor_is_a_partial_download(tmp_path):
    blob, _, _, b_end = _two_tensor_file()
    f = partial(tmp_path, blob[: b_end - 100])
    assert (f.missing.tensors, f.missing.missing_bytes, f.missing.first_cut) == (("b",), 100, True)
    assert f.tensor_bytes("a").nbytes == 4 * 1001
    with pytest.raises(GGUFError, match="tensor b's data is not in the file: it is a partial download"):
        f.tensor_bytes("b")
    with pytest.raises(GGUFError, match="the numpy engine needs every weight"):
        f.require_whole("the numpy engine")


def test_file_cut_inside_the_first_tensor_is_a_partial_download(tmp_path):
    blob, a_end, _, b_end = _two_tensor_file()
    cut = a_end - 1000
    f = partial(tmp_path, blob[:cut])
    assert (f.missing.tensors, f.missing.missing_bytes, f.missing.first_cut) == (("a", "b"), b_end - cut, True)
    assert "2 of 2 tensors: a (cut), b" in f.missing.warning()
    for name in "ab":
        with pytest.raises(GGUFError, match="partial download"):
            f.tensor_bytes(name)


def test_file_cut_in_the_padding_before_a_tensor_is_a_partial_download(tmp_path):
    blob, a_end, b_start, b_end = _two_tensor_file()
    assert b_start > a_end
    f = partial(tmp_path, blob[:a_end])
    assert (f.missing.tensors, f.missing.missing_bytes, f.missing.first_cut) == (("b",), b_end - a_end, False)


def test_file_whole_has_nothing_missing(tmp_path):
    blob, _, _, _ = _two_tensor_file()
    assert open_gguf(write(tmp_path, blob)).missing is None


def test_file_cut_with_a_gap_between_tensors_is_refused(tmp_path):
    """Data no GGUF writer lays out (a gap before 'b') and cut short: damaged, not a partial download."""
    blob, _, _, b_end = _two_tensor_file(gap=64)
    refused(tmp_path, blob[: b_end - 100], "shorter than its tensor table", "'b' is cut",
            "100 of its 2.0 KiB (2,048 bytes)", "download")


def test_file_cut_inside_the_first_tensor_with_a_gap_is_refused(tmp_path):
    blob, a_end, _, b_end = _two_tensor_file(gap=64)
    cut = a_end - 1000
    message = refused(
        tmp_path, blob[:cut], "'a' is cut", "1,000 of its 3.9 KiB (4,004 bytes)", "1 tensor(s) after it"
    )
    assert f"{exact_bytes(b_end - cut)} shorter" in message


def test_file_cut_in_the_gap_before_a_tensor_is_refused(tmp_path):
    blob, a_end, b_start, b_end = _two_tensor_file(gap=64)
    refused(tmp_path, blob[:a_end], "'b'", f"starts at byte {b_start:,}, past the end",
            f"{exact_bytes(b_end - a_end)} shorter")


@pytest.mark.parametrize("keep", [24, 30, 40, 60, 100, 120])
def test_file_cut_inside_the_header(tmp_path, keep):
    blob, _, _, _ = _two_tensor_file()
    refused(tmp_path, blob[:keep], "(at byte")


def test_file_cut_inside_a_metadata_value(tmp_path):
    blob = header(0, 1) + kv("general.name", (V.STRING, "a long enough name"))
    refused(tmp_path, blob[:-5], "'general.name'", "left")


# ---- what is accepted -------------------------------------------------------------------


def test_non_utf8_string_values_are_replaced_not_refused(tmp_path):
    blob = header(0, 2)
    blob += string("general.name") + u32(V.STRING) + string(b"caf\xe9 \xff")
    blob += string("a.list") + u32(V.ARRAY) + array(V.STRING, [b"ok", b"\xc3"])
    f = open_gguf(write(tmp_path, blob))
    assert f.get("general.name") == "caf\ufffd \ufffd"
    assert f.get("a.list") == ["ok", "\ufffd"]


SCALARS = {
    "t.u8": (V.UINT8, 200),
    "t.i8": (V.INT8, -100),
    "t.u16": (V.UINT16, 60000),
    "t.i16": (V.INT16, -30000),
    "t.u32": (V.UINT32, 4_000_000_000),
    "t.i32": (V.INT32, -2_000_000_000),
    "t.u64": (V.UINT64, (1 << 64) - 1),
    "t.i64": (V.INT64, -(1 << 63)),
    "t.f32": (V.FLOAT32, 0.5),
    "t.f64": (V.FLOAT64, -1e300),
    "t.bool": (V.BOOL, True),
    "t.str": (V.STRING, "héllo \x1b[31m"),
}


def test_valid_file_opens_with_correct_values(tmp_path):
    rng = np.random.default_rng(0)
    q8 = rng.integers(0, 256, size=tensor_nbytes((64, 3), Q.Q8_0), dtype=np.uint8).tobytes()
    f32 = np.arange(12, dtype="<f4").tobytes()
    metadata = dict(SCALARS)
    metadata["t.ints"] = (V.ARRAY, V.INT32, [1, -2, 3])
    metadata["t.floats"] = (V.ARRAY, V.FLOAT32, [0.25, 1.5])
    metadata["t.words"] = (V.ARRAY, V.STRING, ["a", "", "ü"])
    metadata["t.empty"] = (V.ARRAY, V.UINT8, [])
    tensors = [
        Tensor("blk.0.w", (64, 3), Q.Q8_0, data=q8),
        Tensor("scalar", (), Q.F32, data=b"\x00\x00\x80\x3f"),
        Tensor("empty", (4, 0), Q.F16),
        Tensor("m", (4, 3), Q.F32, data=f32),
    ]
    path = write(tmp_path, build_gguf(metadata, tensors))
    f = open_gguf(path)

    for key, (vtype, value) in SCALARS.items():
        assert f.fields[key].type == vtype
        assert f.get(key) == value
    assert f.get("t.ints").tolist() == [1, -2, 3]
    assert f.get("t.floats").tolist() == [0.25, 1.5]
    assert f.get("t.words") == ["a", "", "ü"]
    assert f.get("t.empty").tolist() == []
    assert f.fields["t.words"].type_name == "array[string]" and f.fields["t.words"].count == 3
    assert f.get("absent", "default") == "default"

    assert list(f.tensors) == ["blk.0.w", "scalar", "empty", "m"]
    w = f.tensors["blk.0.w"]
    assert (w.shape, w.np_shape, w.ggml_type, w.nbytes) == ((64, 3), (3, 64), Q.Q8_0, len(q8))
    assert f.tensor_bytes("blk.0.w").tobytes() == q8
    assert f.tensors["scalar"].n_elements == 1
    assert np.frombuffer(f.tensor_bytes("scalar"), dtype="<f4").tolist() == [1.0]
    assert f.tensors["empty"].nbytes == 0
    assert np.frombuffer(f.tensor_bytes("m"), dtype="<f4").reshape(
        f.tensors["m"].np_shape
    ).tolist() == (np.arange(12).reshape(3, 4).tolist())
    assert f.file_size == path.stat().st_size
    assert sum(f.layout().values()) == f.file_size


def test_valid_file_agrees_with_gguf_package_reader(tmp_path):
    """The gguf package's own reader, run on the same built file, sees the same table."""
    from gguf import GGUFReader

    metadata = {"general.architecture": (V.STRING, "llama"), "t.list": (V.ARRAY, V.UINT16, [5, 6])}
    tensors = [
        Tensor("a", (32, 2), Q.Q4_0),
        Tensor("b", (256,), Q.Q6_K),
        Tensor("c", (3, 5), Q.F16),
    ]
    path = write(tmp_path, build_gguf(metadata, tensors))
    ours, theirs = open_gguf(path), GGUFReader(path)
    assert [
        (t.name, list(t.shape), int(t.ggml_type), t.offset, t.nbytes) for t in ours.tensors.values()
    ] == [
        (t.name, t.shape.tolist(), int(t.tensor_type), t.data_offset, t.n_bytes)
        for t in theirs.tensors
    ]
    assert ours.get("t.list").tolist() == theirs.fields["t.list"].contents()


def test_version_2_opens(tmp_path):
    blob = header(1, 1, version=2) + ARCH + tensor_info("w", (8,), Q.F32, 0)
    f = open_gguf(write(tmp_path, blob + padding(len(blob)) + bytes(32)))
    assert f.version == 2 and f.tensors["w"].nbytes == 32


def test_file_without_tensors_may_end_before_its_padding(tmp_path):
    blob = header(0, 1) + ARCH
    f = open_gguf(write(tmp_path, blob))
    assert f.tensors == {} and f.layout()["data"] == 0 and sum(f.layout().values()) == len(blob)
    assert f.header_bytes == len(blob)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_gguf(tmp_path / "absent.gguf")


def test_folder_is_refused(tmp_path):
    with pytest.raises(GGUFError, match="folder"):
        open_gguf(tmp_path)


def test_sparse_header_only_file_from_the_builder(tmp_path):
    path = write_gguf(
        tmp_path / "sparse.gguf", {}, [Tensor("w", (4096, 4096), Q.Q8_0)], sparse=True
    )
    f = open_gguf(path)
    assert f.tensors["w"].nbytes == tensor_nbytes((4096, 4096), Q.Q8_0)
    assert f.tensors["w"].offset + f.tensors["w"].nbytes <= f.file_size


def test_the_fast_tensor_table_reader_agrees_with_the_checked_one(fixtures_dir):
    """The bulk path `open_gguf` takes for the tensor table gives exactly the rows the checked reader gives."""
    from walkthrough.inspect import gguf

    for path in sorted((fixtures_dir / "reference").glob("*.gguf")):
        f = open_gguf(path)
        first = min(t.info_offset for t in f.tensors.values())
        cursor = gguf._Cursor(f._shards[0].buf, f._shards[0].size, path, first)
        checked = [gguf._read_tensor_info(cursor, i) for i in range(len(f.tensors))]
        fast = gguf._fast_tensor_table(f._shards[0].buf, first, f._shards[0].size, len(f.tensors))
        assert fast is not None and fast.pop() == cursor.pos
        assert fast == checked, path.name
        f.close()


def test_a_missing_size_reads_in_binary_units_with_its_exact_count():
    """Issue 28's figure: '4483843808 bytes' is written as a size a reader takes in, and the exact count."""
    assert exact_bytes(4483843808) == "4.2 GiB (4,483,843,808 bytes)"
    assert exact_bytes(1023) == "1,023 bytes" and exact_bytes(2048) == "2.0 KiB (2,048 bytes)"

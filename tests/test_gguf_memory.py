"""Opening never touches tensor data: a 20 GB model (a sparse file) opens at the cost of its header.

Long metadata strings are located, not read, on open; `get` reads them and arrays within a
per-value limit and a per-file budget (tests/test_hostile_sizes.py runs the commands on 1 GiB ones).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGUFValueType
from gguf_builder import Tensor, llama_shaped_tensors, tensor_nbytes, write_gguf

from walkthrough.inspect import gguf
from walkthrough.inspect.gguf import GGUFError, open_gguf

TARGET_BYTES = 20 * 10**9


def _rss_bytes() -> int | None:
    """Resident set size of this process from /proc (None where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@pytest.fixture(scope="module")
def big_sparse_model(tmp_path_factory) -> tuple[Path, list[Tensor]]:
    """A header describing a llama-shaped model of about 20 GB, its data a hole in a sparse file."""
    tensors = llama_shaped_tensors()
    meta = {"general.architecture": (GGUFValueType.STRING, "llama")}
    path = write_gguf(tmp_path_factory.mktemp("big") / "big.gguf", meta, tensors, sparse=True)
    if path.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the temporary folder's file system does not keep sparse files sparse")
    return path, tensors


def test_header_describes_at_least_20_gb(big_sparse_model):
    path, tensors = big_sparse_model
    assert sum(tensor_nbytes(t.shape, t.ggml_type) for t in tensors) >= TARGET_BYTES
    assert path.stat().st_size >= TARGET_BYTES


def test_large_sparse_file_opens_without_reading_its_data(big_sparse_model):
    path, tensors = big_sparse_model
    rss_before = _rss_bytes()
    tracemalloc.start()
    f = open_gguf(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = _rss_bytes()

    assert len(f.tensors) == len(tensors)
    assert f.data_bytes == sum(tensor_nbytes(t.shape, t.ggml_type) for t in tensors)
    assert f.file_size == path.stat().st_size
    last = f.tensors[tensors[-1].name]
    assert last.offset + last.nbytes <= f.file_size
    assert peak < 4 << 20  # Python allocations while opening: the table, not the data
    if rss_before is not None and rss_after is not None:
        assert rss_after - rss_before < 64 << 20


def test_tensor_bytes_is_a_view_not_a_copy(big_sparse_model):
    path, tensors = big_sparse_model
    f = open_gguf(path)
    name = tensors[-1].name
    view = f.tensor_bytes(name)
    assert view.nbytes == f.tensors[name].nbytes
    assert not view.flags.owndata and not view.flags.writeable
    assert np.count_nonzero(view[-4096:]) == 0  # a hole in a sparse file reads as zeros


LONG = gguf.EAGER_STRING_BYTES + 1000  # characters of a string too long to decode on open


@pytest.fixture()
def long_strings(tmp_path) -> Path:
    meta = {"general.architecture": (GGUFValueType.STRING, "llama"),
            "a": (GGUFValueType.STRING, "é" * LONG), "b": (GGUFValueType.STRING, "x" * LONG),
            "n": (GGUFValueType.ARRAY, GGUFValueType.INT32, list(range(5000)))}
    return write_gguf(tmp_path / "long.gguf", meta)


def test_a_long_string_is_located_on_open_and_read_when_asked(long_strings):
    f = open_gguf(long_strings)
    assert f.fields["a"].is_lazy and f.fields["a"].scalar is None and f.fields["a"].nbytes == 2 * LONG
    assert not f.fields["general.architecture"].is_lazy
    assert f.get("a") == "é" * LONG
    assert f.string_head("a", 5) == ("éé", True)  # the third "é" is cut in two: left out, not replaced
    assert f.short_text("b", 3) == "xxx…" and f.short_text("n", 3) is None
    assert f.array_head("n", 3) == [0, 1, 2]


def test_a_value_over_the_limit_is_refused_naming_it(long_strings, monkeypatch):
    monkeypatch.setattr(gguf, "MAX_VALUE_BYTES", 2 * LONG - 1)
    f = open_gguf(long_strings)
    assert f.too_big("b") is None and "a holds" in f.too_big("a")
    with pytest.raises(GGUFError, match=f"long.gguf: a holds {2 * LONG:,} bytes"):
        f.get("a")
    assert f.get("b") == "x" * LONG
    monkeypatch.setattr(gguf, "MAX_VALUE_BYTES", 4 * 5000 - 1)
    with pytest.raises(GGUFError, match="n holds 20,000 bytes"):
        f.get("n")


def test_reads_stop_at_the_budget(long_strings, monkeypatch):
    monkeypatch.setattr(gguf, "READ_BUDGET", 3 * LONG - 1)  # a and b take 3 * LONG bytes
    f = open_gguf(long_strings)
    f.get("a")
    f.get("a")  # read once, then kept: no charge
    with pytest.raises(GGUFError, match="would take the values read from this file past"):
        f.get("b")

"""Opening never touches tensor data: a 20 GB model (a sparse file) opens at the cost of its header."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGUFValueType
from gguf_builder import Tensor, llama_shaped_tensors, tensor_nbytes, write_gguf

from walkthrough.inspect.gguf import open_gguf

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

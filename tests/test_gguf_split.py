"""Split models (`NAME-0000k-of-0000n.gguf`): any shard opens all of them into one tensor table.

Real split sets are written with the gguf package's `GGUFWriter` (which, like
llama.cpp's gguf-split, keeps the metadata in shard 1 and writes `split.no`,
`split.count` and `split.tensors.count` in every shard); broken ones are built
byte by byte.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter
from gguf.constants import GGUFValueType, Keys
from gguf_builder import Tensor, write_gguf

from walkthrough.inspect.gguf import GGUFError, open_gguf, shard_paths

V = GGUFValueType
N_TENSORS = 5


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        f"blk.{i}.w": rng.standard_normal((3, 8 + 8 * i)).astype(np.float32)
        for i in range(N_TENSORS)
    }


@pytest.fixture
def split_set(tmp_path):
    """A 3-shard model (2 + 2 + 1 tensors) written by GGUFWriter; returns the shard paths."""
    writer = GGUFWriter(tmp_path / "model.gguf", "llama", split_max_tensors=2)
    writer.add_block_count(N_TENSORS)
    writer.add_name("split test")
    for name, w in _weights().items():
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    paths = sorted(tmp_path.glob("model-*-of-*.gguf"))
    assert [p.name for p in paths] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return paths


@pytest.mark.parametrize("which", [0, 1, 2])
def test_any_shard_opens_the_whole_model(split_set, which):
    f = open_gguf(split_set[which])
    weights = _weights()
    assert f.paths == split_set
    assert list(f.tensors) == list(weights)
    assert f.get("general.name") == "split test" and f.get("llama.block_count") == N_TENSORS
    assert [t.shard for t in f.tensors.values()] == [0, 0, 1, 1, 2]
    for name, w in weights.items():
        t = f.tensors[name]
        assert t.np_shape == w.shape
        assert np.array_equal(
            np.frombuffer(f.tensor_bytes(name), dtype=np.float32).reshape(w.shape), w
        )
    assert f.file_size == sum(p.stat().st_size for p in split_set)


def test_shard_paths_lists_every_shard_in_order(split_set):
    assert shard_paths(split_set[2]) == split_set


def test_single_file_is_its_own_shard(tmp_path):
    path = write_gguf(tmp_path / "one.gguf", {}, [Tensor("w", (8,))])
    assert shard_paths(path) == [path]
    assert open_gguf(path).paths == [path]


@pytest.mark.parametrize(
    "name", ["x-00001-of-00000.gguf", "x-00000-of-00002.gguf", "x-00003-of-00002.gguf"]
)
def test_impossible_shard_numbers_are_plain_file_names(tmp_path, name):
    path = write_gguf(tmp_path / name, {}, [Tensor("w", (8,))])
    assert shard_paths(path) == [path]
    assert list(open_gguf(path).tensors) == ["w"]


def test_missing_shard_is_named(split_set):
    split_set[1].unlink()
    with pytest.raises(GGUFError) as info:
        open_gguf(split_set[0])
    assert "model-00002-of-00003.gguf" in str(info.value) and "missing" in str(info.value)


def test_shards_in_the_wrong_order_are_refused(split_set):
    second, third = split_set[1], split_set[2]
    data = second.read_bytes()
    second.write_bytes(third.read_bytes())
    third.write_bytes(data)
    with pytest.raises(GGUFError, match=r"split\.no is 2, expected 1"):
        open_gguf(split_set[0])


def _shard_meta(no: int, count: int, total: int) -> dict:
    return {
        Keys.Split.LLM_KV_SPLIT_NO: (V.UINT16, no),
        Keys.Split.LLM_KV_SPLIT_COUNT: (V.UINT16, count),
        Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT: (V.INT32, total),
    }


def test_tensor_count_must_match_split_tensors_count(tmp_path):
    write_gguf(tmp_path / "m-00001-of-00002.gguf", _shard_meta(0, 2, 3), [Tensor("a", (8,))])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", _shard_meta(1, 2, 3), [Tensor("b", (8,))])
    with pytest.raises(
        GGUFError, match=r"split\.tensors\.count says 3 tensors but the 2 shards hold 2"
    ):
        open_gguf(tmp_path / "m-00002-of-00002.gguf")


def test_split_count_must_match_the_name(tmp_path):
    write_gguf(tmp_path / "m-00001-of-00002.gguf", _shard_meta(0, 3, 2), [Tensor("a", (8,))])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", _shard_meta(1, 3, 2), [Tensor("b", (8,))])
    with pytest.raises(GGUFError, match=r"name says 2 shards but split\.count says 3"):
        open_gguf(tmp_path / "m-00001-of-00002.gguf")


def test_tensor_in_two_shards_is_refused(tmp_path):
    write_gguf(tmp_path / "m-00001-of-00002.gguf", _shard_meta(0, 2, 2), [Tensor("a", (8,))])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", _shard_meta(1, 2, 2), [Tensor("a", (8,))])
    with pytest.raises(GGUFError, match=r"'a' appears in two shards"):
        open_gguf(tmp_path / "m-00001-of-00002.gguf")


def test_renamed_shard_is_refused(tmp_path):
    path = write_gguf(tmp_path / "renamed.gguf", _shard_meta(0, 3, 1), [Tensor("a", (8,))])
    with pytest.raises(GGUFError, match=r"one of 3 splits.*NAME-00001-of-00003\.gguf"):
        open_gguf(path)


def test_split_key_of_the_wrong_type_is_refused(tmp_path):
    meta = _shard_meta(0, 2, 2) | {Keys.Split.LLM_KV_SPLIT_NO: (V.STRING, "0")}
    write_gguf(tmp_path / "m-00001-of-00002.gguf", meta, [Tensor("a", (8,))])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", _shard_meta(1, 2, 2), [Tensor("b", (8,))])
    with pytest.raises(GGUFError, match=r"split\.no must be an integer"):
        open_gguf(tmp_path / "m-00002-of-00002.gguf")

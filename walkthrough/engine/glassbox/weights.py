"""Tensors of an opened GGUF as float32 numpy arrays, dequantized lazily and cached.

Nothing is read when a model opens: a tensor's bytes are dequantized (Q4_0, Q4_1,
Q8_0 and the k-quants by `dequant` in whole-array numpy operations, any other type
by `gguf.quants.dequantize`, the same values bit for bit) the first time the
forward pass asks for it and kept
in a cache bounded by `max_cache_bytes`, so the same weight is never
dequantized twice per token while it fits (a full cache keeps what it holds, see
`_remember`; a matrix larger than a share of it is multiplied a block of rows at
a time and never held whole: `row_blocks`). Routed-expert tensors
(`blk.N.ffn_{gate,up,down}_exps.weight`, ggml shape [ne0, ne1, n_expert]) are
sliced per expert from the raw bytes, so only experts a token actually chose
are ever dequantized. Embedding rows are dequantized one row at a time.

Shapes are numpy order (the reverse of ggml's): a matrix stored with ggml shape
[n_in, n_out] comes back as [n_out, n_in], so `x @ w.T` applies it.

Matrices of the types `quantdot` multiplies as llama.cpp does (Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) can instead be fetched `packed`: their
integer codes and block scales, cached the same way, never dequantized.

The first time a tensor (or expert slice) is ever produced is one-time work, not
part of the pass that asked for it: `first_use_seconds`, `first_use_bytes` and
`first_use_tensors` count it (a tensor the full cache could not keep and a pass
produces again, or a matrix streamed in row blocks, is that pass's own work), so
`Session.run` can report it apart from the pass's time.

The cache is safe when two threads reach it: its order, evictions and byte
counters change under a lock (dequantizing runs outside it; two threads that
miss the same tensor at once both dequantize it, and the cache keeps one).

Every type `gguf.quants` can dequantize works (F32, F16, BF16, Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ*, TQ*, MXFP4); any other type raises a
`WalkthroughError` naming the tensor.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.engine.glassbox import lane_products, quantdot
from walkthrough.engine.glassbox.dequant import dequantize_fast
from walkthrough.engine.glassbox.ops import COLUMN_GROUP, padded_columns
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile, TensorInfo

DEFAULT_CACHE_BYTES = 4 << 30  # dequantized float32 weights kept in memory (4 GiB)
WHOLE_SHARE = 0.25  # a matrix larger than this share of the budget is multiplied a block of rows at a time
BLOCK_BYTES = 32 << 20  # one block of rows of such a matrix, dequantized


def row_nbytes(t: TensorInfo) -> int:
    """Stored bytes of one row (ne0 values) of a tensor."""
    block, size = GGML_QUANT_SIZES[t.ggml_type]
    return t.shape[0] // block * size


def product_dtype(t: TensorInfo) -> type:
    """The dtype a matrix is held and multiplied in: float64 for an F32 matrix, its sums rounded once (ggml sums
    them in float32 in tinyBLAS's order, `ggml_math.f32_matmul`: a float32 BLAS order is further from it than a
    sum rounded once); float32, row by row (`ops.linear`), for any other."""
    return np.float64 if t.ggml_type == GGMLQuantizationType.F32 and len(t.shape) >= 2 else np.float32


def _key(name: str, dtype: type, offsets: bool) -> tuple:
    """The cache key of a whole tensor in `dtype`, with or without its block offsets as extra columns."""
    return (name, dtype, offsets)


def _columns_key(name: str | tuple[str, ...], offsets: bool) -> tuple:
    """The cache key of a matrix (or a side-by-side stack of them) held by columns (`Weights.columns`)."""
    return ("columns", name, offsets)


def _stacked_key(names: tuple[str, ...], dtype: type, offsets: bool) -> tuple:
    """The cache key of matrices stacked by rows (`Weights.stacked`)."""
    return ("stacked", names, dtype, offsets)


def with_offsets(w: np.ndarray, offsets: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """[n_out, n_in] values, [n_out, n_in / 32] block offsets -> [n_out, n_in + n_in / 32] in `dtype`.

    A Q4_1/Q5_1 product as llama.cpp takes it is the rounded input times the values plus the error of
    Q8_1's stored block sums times the offsets (`quantdot.rounded_q8_1`): with the error as extra input
    columns, one product does both.
    """
    return np.concatenate([w.reshape(offsets.shape[0], -1), offsets], axis=1).astype(dtype, copy=False)


def dequantize_rows(raw: np.ndarray, ggml_type: GGMLQuantizationType, row_len: int, name: str) -> np.ndarray:
    """Stored bytes of whole rows -> float32 values.

    Args:
        raw: uint8 bytes of n whole rows, contiguous.
        ggml_type: how they are stored.
        row_len: values per row (ne0).
        name: tensor name, for the error message.

    Returns:
        [n_rows, row_len] float32.
    """
    if ggml_type == GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(-1, row_len)
    fast = dequantize_fast(raw, ggml_type)
    if fast is not None:
        return fast.reshape(-1, row_len)
    block, size = GGML_QUANT_SIZES[ggml_type]
    rows = raw.reshape(-1, row_len // block * size)
    try:
        out = quants.dequantize(rows, ggml_type)
    except NotImplementedError:
        raise WalkthroughError(
            f"tensor {name} is stored as {ggml_type.name}, which gguf.quants cannot dequantize; "
            "the engine cannot run this file (inspect still works)"
        ) from None
    return np.ascontiguousarray(out, dtype=np.float32).reshape(-1, row_len)


def stack_heights(infos: list[TensorInfo | None], row_group: int) -> list[int] | None:
    """The heights (output rows) of matrices that can be multiplied as one float32 matrix, their rows stacked, or
    None: two or more, all present, 2-D, of one quantized (or F16) type and input width, all but the last a whole
    number of `row_group` rows high (`Weights.stackable` adds the budget's share)."""
    if len(infos) < 2 or any(t is None or len(t.shape) != 2 for t in infos):
        return None
    first = infos[0]
    ok = (product_dtype(first) is np.float32
          and all(t.ggml_type == first.ggml_type and t.shape[0] == first.shape[0] for t in infos)
          and all(t.shape[1] % row_group == 0 for t in infos[:-1]))
    return [t.shape[1] for t in infos] if ok else None


class Weights:
    """Lazy float32 views of a file's tensors, with a bounded least-recently-used cache."""

    def __init__(self, f: GGUFFile, *, max_cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.file = f
        self.max_cache_bytes = max_cache_bytes
        self._cache: OrderedDict[object, np.ndarray | quantdot.Packed] = OrderedDict()
        self._cached_bytes = 0
        self.dequantized_bytes = 0  # bytes of float32 (or packed) weights produced so far (a measure of work)
        self._lock = threading.Lock()  # guards the cache's order and the counters
        self._seen: set[object] = set()  # keys produced at least once
        self.first_use_seconds = 0.0  # time spent producing tensors the first time they were asked for
        self.first_use_bytes = 0  # bytes of float32 (or packed) weights those first uses produced
        self.first_use_tensors = 0
        self._stackable: dict[tuple, list[int] | None] = {}  # `stackable`'s answers
        self._lanes_fit: bool | None = None  # whether the budget holds every weight and lane copy (`lanes`), once

    @property
    def cached_bytes(self) -> int:
        """Bytes the cache holds now (at most `max_cache_bytes`)."""
        return self._cached_bytes

    def cached(self) -> dict[object, np.ndarray | quantdot.Packed]:
        """What the cache holds now, least recently used first (a copy)."""
        with self._lock:
            return dict(self._cache)

    def has(self, name: str) -> bool:
        return name in self.file.tensors

    def info(self, name: str) -> TensorInfo:
        return self.file.tensors[name]

    # ---- cache -------------------------------------------------------------------
    def _cached(self, key: object):
        with self._lock:
            value = self._cache.get(key)
            if value is not None:
                self._cache.move_to_end(key)
            return value

    def _remember(self, key: object, value):
        """Keep `value` (an array or a `quantdot.Packed`, anything with `nbytes`) in the cache if it has room;
        returns the value cached under `key` (another thread's, when it cached the same tensor first).

        A full cache keeps what it holds and lets the newcomer go. Every pass reads the weights in the same
        order, once each: evicting the least recently used one would evict each weight just before its next
        use (no hits at all once the model is larger than the budget), while keeping the first ones gives a
        hit for each weight kept, every pass.
        """
        with self._lock:
            self.dequantized_bytes += value.nbytes
            held = self._cache.get(key)
            if held is not None:
                self._cache.move_to_end(key)
                return held
            if self._cached_bytes + value.nbytes > self.max_cache_bytes:
                return value
            self._cache[key] = value
            self._cached_bytes += value.nbytes
            return value

    def held_matrix(self, names: tuple[str, ...], *, by_columns: bool, offsets: bool) -> np.ndarray | None:
        """The float32 matrix the cache holds now for `names` (one matrix, or a stack), by columns as `columns` holds it
        or by rows as `get` / `stacked` do, with the block offsets or not; None when it holds none."""
        name = names[0] if len(names) == 1 else names
        if by_columns:
            key = _columns_key(name, offsets)
        else:
            key = _key(name, np.float32, offsets) if len(names) == 1 else _stacked_key(names, np.float32, offsets)
        with self._lock:
            return self._cache.get(key)

    def holds(self, name: str, dtype: type = np.float32, *, offsets: bool = False) -> bool:
        """Whether the cache holds the whole tensor in `dtype` (with its offsets: `get`) now."""
        return _key(name, dtype, offsets) in self._cache

    def whole(self, name: str, dtype: type) -> bool:
        """Whether a matrix is held whole in `dtype` (cached already, or small enough a share of the budget,
        `WHOLE_SHARE`); otherwise `row_blocks` multiplies it a block of rows at a time."""
        t = self.file.tensors[name]
        return (self.holds(name, dtype) or self.holds_columns(name) or self.holds_columns(name, offsets=True)
                or t.n_elements * (8 if dtype is np.float64 else 4) <= self.max_cache_bytes * WHOLE_SHARE)

    def row_blocks(self, name: str, dtype: type, multiple: int = 1, *,
                   offsets: bool = False) -> Iterator[tuple[int, int, np.ndarray]]:
        """A matrix (numpy order [n_out, n_in]) a block of output rows at a time: (first row, end row,
        [rows, n_in] in `dtype`, or [rows, n_in + n_in / 32] with `offsets`, as `get`), each block at most
        `BLOCK_BYTES` (or `multiple` rows) and a whole number of `multiple` rows but the last, none of them cached."""
        for r0, r1, block in self._row_blocks(name, dtype, multiple, offsets):
            with self._lock:
                self.dequantized_bytes += block.nbytes
            yield r0, r1, block

    def _row_blocks(self, name: str, dtype: type, multiple: int,
                    offsets: bool) -> Iterator[tuple[int, int, np.ndarray]]:
        """`row_blocks` without counting the work (a caller that keeps the result counts it once)."""
        t = self.file.tensors[name]
        raw = self.file.tensor_bytes(name).reshape(-1, row_nbytes(t))  # [n_out, stored bytes per row]
        step = max(multiple, BLOCK_BYTES // (t.shape[0] * np.dtype(dtype).itemsize) // multiple * multiple)
        for r0 in range(0, raw.shape[0], step):
            r1 = min(r0 + step, raw.shape[0])
            rows = np.ascontiguousarray(raw[r0:r1])
            block = dequantize_rows(rows, t.ggml_type, t.shape[0], name)
            if offsets:
                block = with_offsets(block, quantdot.block_offsets(rows, t.ggml_type, t.shape[0]))
            yield r0, r1, block.astype(dtype, copy=False)

    def holds_columns(self, name: str, *, offsets: bool = False) -> bool:
        """Whether the cache holds the matrix by columns (`columns`) now."""
        return _columns_key(name, offsets) in self._cache

    def columns(self, name: str | tuple[str, ...], *, offsets: bool = False) -> np.ndarray:
        """A float32 matrix held by columns, as `ops.linear_columns` takes it: [n_in (+ n_in / 32 with `offsets`),
        n_out padded with zero columns to a whole number of `ops.COLUMN_GROUP`], C order; for a tuple of names,
        the matrices side by side (one input width), each padded so (`column_starts`). Built a block of rows at
        a time, so it never takes twice its size on the way; cached as one value."""
        names = (name,) if isinstance(name, str) else name
        key = _columns_key(name if isinstance(name, str) else names, offsets)
        return self._load(key, lambda: self._columns(names, offsets))

    def column_starts(self, names: tuple[str, ...]) -> list[int]:
        """Where each matrix of `columns(names)` starts, and where the last ends: [0, ..., total padded columns]."""
        starts = [0]
        for name in names:
            starts.append(starts[-1] + padded_columns(self.file.tensors[name].shape[1]))
        return starts

    def _columns(self, names: tuple[str, ...], offsets: bool) -> np.ndarray:
        width = self.file.tensors[names[0]].shape[0]
        width += width // 32 if offsets else 0
        starts = self.column_starts(names)
        out = np.zeros((width, starts[-1]), np.float32)  # [n_in (+ offsets), padded n_out]
        for name, start in zip(names, starts):
            for r0, r1, block in self._row_blocks(name, np.float32, COLUMN_GROUP, offsets):
                out[:, start + r0 : start + r1] = block.T
        return out

    def column_blocks(self, name: str, multiple: int, *,
                      offsets: bool = False) -> Iterator[tuple[int, int, np.ndarray]]:
        """A matrix too large to hold, by columns a block at a time (`row_blocks`' blocks, whole numbers of
        `multiple` rows, transposed): (first output, end output, [n_in (+ offsets), end - first padded as
        `columns` pads]), uncached."""
        for r0, r1, block in self.row_blocks(name, np.float32, multiple, offsets=offsets):
            wt = np.zeros((block.shape[1], padded_columns(r1 - r0)), np.float32)
            wt[:, : r1 - r0] = block.T
            yield r0, r1, wt

    def _load(self, key: object, make: Callable[[], np.ndarray | quantdot.Packed], *, weight: bool = True):
        """The cached value of `key`, or `make()`'s (timed: its first production is one-time work). Not a `weight`
        (a lane copy): its first production's time counts, its bytes and tensor do not (`first_use`)."""
        value = self._cached(key)
        if value is not None:
            return value
        began = time.perf_counter()
        value = make()
        took = time.perf_counter() - began
        with self._lock:
            if key not in self._seen:
                self._seen.add(key)
                self.first_use_seconds += took
                if weight:
                    self.first_use_bytes += value.nbytes
                    self.first_use_tensors += 1
        return self._remember(key, value)

    def lanes(self, key: object) -> lane_products.HeldLanes | None:
        """A keeper of a float32 matrix's lane copies for `ops.linear` (`lane_products.linear`'s `held`), or None where
        the budget cannot hold every weight and every lane copy together (`costs.memory.lane_copies_fit`), so a lane
        copy never takes the room a weight needs: each block's `lane_products.lane_matrix`, cached under ("lanes",
        `key`, first row) like a tensor (its first copy's time is first-use time, its bytes are not counted as
        dequantized). `key` names the matrix: a tensor's name or a stack's names, and whether the block offsets are
        folded in.

        Held, they cost memory for speed: SmolLM2-135M's q/k/v, attention output and FFN down take 205 MiB more
        and a 128-token prefill about 4% less time (docs/op-diff.md, eleventh round); decode never makes them."""
        if self._lanes_fit is None:
            from walkthrough.costs.memory import lane_copies_fit

            self._lanes_fit = lane_copies_fit(self.file, self.max_cache_bytes)
        if not self._lanes_fit:
            return None

        def held(r0: int, block: np.ndarray) -> np.ndarray:
            return self._load(("lanes", key, r0), lambda: lane_products.lane_matrix(block), weight=False)
        return held

    def first_use(self) -> tuple[float, int, int]:
        """(seconds, bytes, tensors) of one-time first-use work so far."""
        with self._lock:
            return self.first_use_seconds, self.first_use_bytes, self.first_use_tensors

    # ---- access ------------------------------------------------------------------
    def get(self, name: str, dtype: type = np.float32, *, offsets: bool = False) -> np.ndarray:
        """The whole tensor, numpy order (ggml [n_in, n_out] -> [n_out, n_in]), float32 or float64.

        Each dtype is cached on its own (an F32 file's matrices are multiplied in float64, see `ops.linear`). With
        `offsets`, a Q4_1/Q5_1 matrix comes with its block offsets as extra columns, [n_out, n_in + n_in / 32]
        (`with_offsets`), and is cached so instead.
        """
        return self._load(_key(name, dtype, offsets), lambda: self._matrix(name, dtype, offsets))

    def _matrix(self, name: str, dtype: type, offsets: bool, raw: np.ndarray | None = None) -> np.ndarray:
        """Dequantize a tensor (or the given stored rows of it) to numpy order in `dtype`, uncached."""
        t = self.file.tensors[name]
        raw = self.file.tensor_bytes(name) if raw is None else raw
        flat = dequantize_rows(raw, t.ggml_type, t.shape[0], name)
        if offsets:
            return with_offsets(flat, quantdot.block_offsets(raw, t.ggml_type, t.shape[0]), dtype)
        shape = t.np_shape if raw.size == t.nbytes else (-1, t.shape[0])  # an expert's slice: [n_out, n_in]
        return flat.reshape(shape).astype(dtype, copy=False)

    def stacked(self, names: tuple[str, ...], dtype: type = np.float32, *, offsets: bool = False) -> np.ndarray:
        """Matrices with the same input width as one, their rows one after another: [sum of n_out, n_in (+ n_in / 32
        with `offsets`)]. Cached as one value; the matrices alone are not."""
        return self._load(_stacked_key(names, dtype, offsets),
                          lambda: np.concatenate([self._matrix(n, dtype, offsets) for n in names]))

    def stackable(self, names: tuple[str, ...], row_group: int) -> list[int] | None:
        """The heights (output rows) of matrices `stacked` can hold as one float32 matrix, or None: `stack_heights`,
        and together within the share of the budget a whole matrix may take."""
        key = (names, row_group)
        if key not in self._stackable:
            infos = [self.file.tensors[n] for n in names]
            heights = stack_heights(infos, row_group)
            fits = sum(t.n_elements for t in infos) * 4 <= self.max_cache_bytes * WHOLE_SHARE
            self._stackable[key] = heights if fits else None
        return self._stackable[key]

    def expert(self, name: str, e: int, dtype: type = np.float32, *, offsets: bool = False) -> np.ndarray:
        """Expert e of a stacked expert tensor (ggml [n_in, n_out, n_expert]) -> [n_out, n_in] (+ its block offsets
        as extra columns with `offsets`, as `get`)."""
        return self._load((*_key(name, dtype, offsets), e), lambda: self._matrix(name, dtype, offsets,
                                                                                 self._expert_bytes(name, e)))

    def _expert_bytes(self, name: str, e: int) -> np.ndarray:
        """Stored bytes of expert e's slice of a stacked expert tensor."""
        per = self.expert_nbytes(name)
        return self.file.tensor_bytes(name)[e * per : (e + 1) * per]

    def can_pack(self, name: str) -> bool:
        """Whether `packed` serves this tensor (a matrix of a type `quantdot` multiplies)."""
        return self.file.tensors[name].ggml_type in quantdot.SUPPORTED

    def packed(self, name: str) -> quantdot.Packed:
        """A matrix as `quantdot` multiplies it: ggml [n_in, n_out] -> codes and scales of [n_out, n_in]."""
        t = self.file.tensors[name]
        return self._load(("packed", name), lambda: quantdot.pack(self.file.tensor_bytes(name), t.ggml_type,
                                                                  t.shape[0]))

    def packed_expert(self, name: str, e: int) -> quantdot.Packed:
        """Expert e of a stacked expert tensor, packed (see `packed`)."""
        t = self.file.tensors[name]
        return self._load(("packed", name, e), lambda: quantdot.pack(self._expert_bytes(name, e), t.ggml_type,
                                                                     t.shape[0]))

    def block_offsets(self, name: str, e: int | None = None) -> np.ndarray:
        """Q4_1/Q5_1 block offsets m [n_out, n_in / 32] of a matrix (or of expert e's slice)."""
        t = self.file.tensors[name]
        raw = self.file.tensor_bytes(name) if e is None else self._expert_bytes(name, e)
        return self._load(("offsets", name, e), lambda: quantdot.block_offsets(raw, t.ggml_type, t.shape[0]))

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a matrix (an embedding lookup): [len(ids), ne0]."""
        whole = self._cached(_key(name, np.float32, False))
        if whole is not None:
            return whole[ids]
        t = self.file.tensors[name]
        raw = self.file.tensor_bytes(name).reshape(-1, row_nbytes(t))
        return dequantize_rows(np.ascontiguousarray(raw[ids]), t.ggml_type, t.shape[0], name)

    def expert_nbytes(self, name: str) -> int:
        """Stored bytes of one expert's slice of a stacked expert tensor."""
        t = self.file.tensors[name]
        return t.nbytes // t.shape[2]

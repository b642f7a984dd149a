"""Counts what one forward pass touches: stored bytes read per tensor group, and FLOPs.

The forward pass fetches every weight through a `Meter`, so the bytes it
reports are the bytes of the weights actually used, in the file's stored
format: a matrix once per pass however many tokens the pass holds, a routed
expert only if some token of the pass chose it, an embedding row per distinct
token, and the KV cache entries attention read. Groups are the model card's
(`walkthrough.inspect.card.tensor_group`), so a decode pass that wakes exactly
`n_experts_used` experts per MoE layer reads the card's `bytes_per_token`.

`written` adds up the bytes of the activation arrays the pass produced: the
output of every matrix product, every RMSNorm, and attention's weights and
output (`wrote`); per layer, it is what that layer's activations took.

FLOPs count multiply-adds as 2 per weight per token for matrix products, and
2 x (key size + value size) per head per visible cached position for attention.
Linear-attention layers of hybrid models read their fixed state once per pass
(group "state", beside "kv_cache").

`linear` and `expert_linear` also apply the product the way llama.cpp's CPU
backend does: the input is rounded to the weight's "vec_dot" format
(`activations`; for Q4_1/Q5_1 with Q8_1's half-precision block sums), and
with `exact_products=True` the types `quantdot` knows are multiplied exactly
as ggml multiplies them (integer block products in its float order: bit for
bit, but about 40 times slower); `match_llama_cpp=False` gives plain float32
products. Either way each row is its own product (`ops.linear`), so results
do not depend on the number of tokens in the pass.

`look` shows an intermediate to an optional `probe` under llama.cpp's graph name
("attn_norm-3", "kq_soft_max-0", "result_output"): the op-by-op differ
(tests/bench/op_diff.py) sets one; without it `look` only returns its argument.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGMLQuantizationType

from walkthrough.engine.glassbox import ggml_math, lane_products, ops, quantdot
from walkthrough.engine.glassbox.activations import round_activations, vec_dot_format
from walkthrough.engine.glassbox.weights import Weights, product_dtype, row_nbytes, with_offsets

# float weight types -> the format exact products take them in (`ggml_math.f32_matmul`'s `kind`)
FLOAT_KINDS = {GGMLQuantizationType.F32: "f32", GGMLQuantizationType.F16: "f16", GGMLQuantizationType.BF16: "bf16"}

Probe = Callable[[str, np.ndarray], None]  # (llama.cpp's graph name "NAME-LAYER" or "NAME", values)


@dataclass(frozen=True)
class HeldProduct:
    """A float32 product without biases whose matrix the weight cache holds, resolved once for every later pass.

    `linear` and `linears` find a product's way (exact or not, by rows or columns, stacked, whole or in blocks) and
    its matrix through a dozen lookups. The cache never lets a held value go (`Weights._remember`), so once the
    matrix is held every later pass takes the same way to the same array: `Model` keeps these in one dict for all
    its passes (`Meter.held`). The same products and counts in fewer calls: on SmolLM2, 3% off a decode pass and a
    prefill (`ab_revisions.py`, 12 rounds: 0.971 and 0.976), the logits the same bits.
    """

    counts: tuple[tuple[str, str], ...]  # (tensor, group) of each matrix, counted by `_count_matrix`
    by_columns: bool  # `ops.linear_columns` (matrix [d_in (+ offsets), padded outputs]), else `ops.linear`
    matrix: np.ndarray  # by rows [outputs, d_in (+ offsets)], by columns [d_in (+ offsets), padded outputs]
    width: int  # the outputs `ops.linear_columns` keeps (the last matrix's end)
    parts: tuple[tuple[int, int], ...]  # (first output, outputs) of each matrix in the product
    lanes: object  # `Weights.lanes`' key of a matrix by rows


class Meter:
    """Weight access for one pass, recording bytes read (stored format) and FLOPs."""

    def __init__(self, weights: Weights, group_of: Callable[[str], str], *, match_llama_cpp: bool = True,
                 exact_products: bool = False, exact_elementwise: bool = True, probe: Probe | None = None,
                 held: dict[tuple, HeldProduct] | None = None):
        """`held`: the products already resolved by the model's earlier passes (`HeldProduct`), which this meter
        also fills; without it, every product is resolved afresh. `exact_elementwise`: RoPE and attention's
        softmax follow ggml's bits (`Model.exact_elementwise`), else numpy's float32 rounding."""
        self.weights = weights
        self.held = {} if held is None else held
        self.probe = probe
        self.group_of = group_of
        self.match_llama_cpp = match_llama_cpp
        self.exact_products = match_llama_cpp and exact_products
        self.exact_elementwise = exact_elementwise or self.exact_products
        self._rounded: tuple | None = None  # last input rounded: (x, (format, offset), `_input`'s result)
        self.bytes_by_group: dict[str, int] = {}
        self.flops = 0
        self.written = 0  # bytes of the activation arrays the pass's operations produced (`wrote`)
        self._seen: set[object] = set()
        self._row_bytes: dict[str, int] = {}  # bytes of single rows already read, per tensor

    def _read(self, key: object, group: str, nbytes: int) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self.bytes_by_group[group] = self.bytes_by_group.get(group, 0) + nbytes

    def tensor(self, name: str, group: str | None = None) -> np.ndarray:
        """A whole tensor (norm weights, biases, small vectors); `group` overrides the name's group.

        Rows of it already read this pass (a tied embedding's lookup) are not counted twice.
        """
        self._read(name, group or self.group_of(name), self.weights.info(name).nbytes - self._row_bytes.get(name, 0))
        return self.weights.get(name)

    def optional(self, name: str) -> np.ndarray | None:
        """A tensor the architecture may or may not have (biases, q/k norms)."""
        return self.tensor(name) if self.weights.has(name) else None

    def _count(self, key: object, group: str, nbytes: int, n_values: int, n_tokens: int) -> None:
        """A matrix applied to n_tokens rows: its stored bytes once, 2 FLOPs per weight per row."""
        self._read(key, group, nbytes)
        self.flops += 2 * n_tokens * n_values

    def _count_matrix(self, name: str, n_tokens: int, group: str | None) -> None:
        info = self.weights.info(name)
        g = group or self.group_of(name)
        self._count(name, g, info.nbytes - self._row_bytes.get(name, 0), info.n_elements, n_tokens)

    def matrix(self, name: str, n_tokens: int, group: str | None = None) -> np.ndarray:
        """A weight matrix applied to n_tokens rows: bytes once, 2 FLOPs per weight per row.

        In the dtype `ops.linear` multiplies it in (`product_dtype`); a Q4_1/Q5_1 matrix matched to llama.cpp
        comes with its block offsets as extra columns (`folds_offsets`).
        """
        self._count_matrix(name, n_tokens, group)
        return self.weights.get(name, self.product_dtype(name), offsets=self.folds_offsets(name))

    def folds_offsets(self, name: str) -> bool:
        """Whether products with `name` take Q8_1's block-sum error as extra input columns against the block
        offsets (`weights.with_offsets`): Q4_1/Q5_1 weights matched to llama.cpp."""
        return self.match_llama_cpp and self.weights.info(name).ggml_type in quantdot.WITH_OFFSET

    def product_dtype(self, name: str) -> type:
        """The dtype `ops.linear` multiplies matrix `name` in (`weights.product_dtype`)."""
        return product_dtype(self.weights.info(name))

    def rounded_input(self, name: str, x: np.ndarray) -> np.ndarray:
        """x as llama.cpp's CPU backend feeds it to a product with tensor `name` (see `activations`)."""
        return self._input(name, x)[0]

    def _input(self, name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(`rounded_input`, and for Q4_1/Q5_1 weights Q8_1's block-sum error `quantdot.rounded_q8_1`, else None).

        Both come from one rounding, kept for the next product with the same input (q, k and v share one;
        so do the FFN's gate and up).
        """
        qtype = self.weights.info(name).ggml_type
        fmt = vec_dot_format(qtype) if self.match_llama_cpp else "f32"
        offset = self.match_llama_cpp and qtype in quantdot.WITH_OFFSET
        last = self._rounded
        if last is not None and last[0] is x and last[1] == (fmt, offset):
            return last[2]
        out = quantdot.rounded_q8_1(x) if offset else (round_activations(x, fmt), None)
        self._rounded = (x, (fmt, offset), out)
        return out

    def linear(self, name: str, x: np.ndarray, bias: str | None = None, *, group: str | None = None,
               by_columns: bool = False) -> np.ndarray:
        """[n, d_in] -> [n, d_out]: x @ W.T (+ the bias tensor if named and present), bytes and FLOPs counted.

        `by_columns` holds a float32 matrix transposed (`ops.linear_columns`): its one-row product is faster,
        a pass of many rows slower. The output head takes it (a pass multiplies it by one row unless it asks
        for every position's logits); either way is chunk-invariant, but the two differ in their last bits.
        """
        route = self.held.get((name, bias, group, by_columns))
        if route is not None:
            return self._held_product(route, name, x)[0]
        b = self.optional(bias) if bias else None
        if self.exact_products and self.weights.can_pack(name):
            self._count_matrix(name, x.shape[0], group)
            y = quantdot.matmul(x, self.weights.packed(name))
            return self.wrote(y + b if b is not None else y)
        kind = FLOAT_KINDS.get(self.weights.info(name).ggml_type)
        if self.exact_products and kind is not None:
            self._count_matrix(name, x.shape[0], group)
            w = self.weights.get(name).reshape(-1, x.shape[-1]).astype(np.float32)
            y = ggml_math.f32_matmul(round_activations(x, kind), w, kind=kind)  # x converted first (`mul_mat`)
            return self.wrote(y + b if b is not None else y)
        dtype = self.product_dtype(name)
        info = self.weights.info(name)
        tall = len(info.shape) == 2 and ops.tall(info.shape[1], info.shape[0])
        if (by_columns or tall) and dtype is np.float32:
            self._count_matrix(name, x.shape[0], group)
            y = self.wrote(self._product_by_columns(name, x, b))
            self._hold((name, bias, group, by_columns), [name], group, b is None, True, [(0, y.shape[1])], None)
            return y
        if not self.weights.whole(name, dtype):
            self._count_matrix(name, x.shape[0], group)
            return self.wrote(self._product_by_blocks(name, x, dtype, b))
        w = self.matrix(name, x.shape[0], group)
        lanes_key = (name, self.folds_offsets(name))
        lanes = self._lanes(lanes_key, x) if dtype is np.float32 else None
        y = self.wrote(self._rounded_product(name, x, w.reshape(-1, w.shape[-1]), b, lanes))
        if dtype is np.float32:
            self._hold((name, bias, group, by_columns), [name], group, b is None, False, [(0, y.shape[1])], lanes_key)
        return y

    def _hold(self, key: tuple, names: list[str], group: str | None, no_bias: bool, by_columns: bool,
              parts: list[tuple[int, int]], lanes: object) -> None:
        """Remember a float32 product just taken as a `HeldProduct` under `key`, if it has no bias and the cache
        holds its matrix (by columns, stacked or alone, with the block offsets if it folds them)."""
        if not no_bias:
            return
        matrix = self.weights.held_matrix(tuple(names), by_columns=by_columns, offsets=self.folds_offsets(names[0]))
        if matrix is None:
            return
        counts = tuple((n, group or self.group_of(n)) for n in names)
        if not by_columns:
            matrix = matrix.reshape(-1, matrix.shape[-1])
        width = parts[-1][0] + parts[-1][1]
        self.held[key] = HeldProduct(counts, by_columns, matrix, width, tuple(parts), lanes)

    def _held_product(self, route: HeldProduct, name: str, x: np.ndarray) -> list[np.ndarray]:
        """`route`'s product of x [n, d_in]: one [n, d_out] per matrix, counted as `linear` / `linears` count."""
        for tensor, group in route.counts:
            self._count_matrix(tensor, x.shape[0], group)
        xr = self._folded_input(name, x)[0]
        if route.by_columns:
            y = ops.linear_columns(xr, route.matrix, route.width)
        else:
            y = ops.linear(xr, route.matrix, lanes=self._lanes(route.lanes, x))
        if len(route.parts) == 1:
            return [self.wrote(y)]
        return [self.wrote(y[:, start : start + height]) for start, height in route.parts]

    def _product_by_blocks(self, name: str, x: np.ndarray, dtype: type, b: np.ndarray | None) -> np.ndarray:
        """x @ W.T (+ b) for a matrix too large for the weight budget, a block of W's rows at a time: each output
        is the same sum as the whole matrix gives it (blocks are whole `ops.ROW_SLAB`s; with the block offsets
        as extra columns as `_rounded_product` takes them), so the budget changes no number."""
        xr, folded = self._folded_input(name, x)
        offsets = self.weights.block_offsets(name, None) if folded else None  # [d_out, d_in / 32]
        info = self.weights.info(name)
        y = np.empty((x.shape[0], info.shape[1]), np.float32)  # [n, d_out]
        for r0, r1, block in self.weights.row_blocks(name, dtype, ops.ROW_SLAB):
            w = block if offsets is None else with_offsets(block, offsets[r0:r1], dtype)
            y[:, r0:r1] = ops.linear(xr, w)
        return y + b if b is not None else y

    def _product_by_columns(self, name: str, x: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """x @ W.T (+ b) with W held by columns (`ops.linear_columns`), whole or, too large for the weight budget,
        a block of columns at a time (whole `ops.COLUMN_GROUP`s: the same sums)."""
        xr, offsets = self._folded_input(name, x)
        d_out = self.weights.info(name).shape[1]
        if self.weights.whole(name, np.float32):
            return ops.linear_columns(xr, self.weights.columns(name, offsets=offsets), d_out, b)
        y = np.empty((x.shape[0], d_out), np.float32)  # [n, d_out]
        for r0, r1, wt in self.weights.column_blocks(name, ops.COLUMN_GROUP, offsets=offsets):
            y[:, r0:r1] = ops.linear_columns(xr, wt, r1 - r0)
        return y + b if b is not None else y

    def _rounded_product(self, name: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                         lanes: lane_products.HeldLanes | None = None) -> np.ndarray:
        """x @ w.T with x rounded as llama.cpp rounds it; for Q4_1/Q5_1, w carries the block offsets as its last
        columns and the input the error of Q8_1's half-precision block sums (`folds_offsets`). `lanes` keeps the
        lane copies of a cached matrix for a pass of many rows (`Weights.lanes`)."""
        return ops.linear(self._folded_input(name, x)[0], w, b, lanes=lanes)

    def _lanes(self, key: object, x: np.ndarray) -> lane_products.HeldLanes | None:
        """The weight cache's keeper of matrix `key`'s lane copies (`Weights.lanes`) for a pass long enough to take
        the lane products (`ops.LANE_ROWS` rows), else None (a decode pass asks for nothing)."""
        return self.weights.lanes(key) if x.shape[0] >= ops.LANE_ROWS else None

    def _folded_input(self, name: str, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """(`rounded_input`, with Q8_1's block-sum error as extra columns [n, d_in + d_in / 32] where the products
        fold the block offsets in, `folds_offsets`), and whether it does."""
        xr, err = self._input(name, x)
        return (xr, False) if err is None else (np.concatenate([xr, err], axis=1), True)

    def linears(self, names: list[str], x: np.ndarray, biases: list[str | None]) -> list[np.ndarray]:
        """Several matrices applied to the same input: [n, d_in] -> one [n, d_out] per name, as `linear` gives them.

        Where it changes no number they are multiplied as one matrix, their rows stacked (`Weights.stacked`):
        a matrix-vector product gives each output row the same sum whatever rows it is handed with, save the
        last few rows of a matrix whose height is not a multiple of the product's row group, so every matrix
        but the last must be a whole number of `ops.ROW_SLAB` rows high. Only the number of products changes.
        A stack `ops.tall` says is held by columns instead (`Weights.columns`, each matrix's outputs padded to
        whole column groups): each output as the matrix alone gives it by columns.
        """
        route = self.held.get((tuple(names), tuple(biases)))
        if route is not None:
            return self._held_product(route, names[0], x)
        heights = None if self.exact_products else self.weights.stackable(tuple(names), ops.ROW_SLAB)
        if heights is None:
            return [self.linear(name, x, bias) for name, bias in zip(names, biases)]
        for name in names:
            self._count_matrix(name, x.shape[0], None)
        offsets = self.folds_offsets(names[0])
        by_columns = ops.tall(sum(heights), x.shape[-1])
        if by_columns:  # the stack held by columns (`ops.tall`)
            xr = self._folded_input(names[0], x)[0]
            starts = self.weights.column_starts(tuple(names))
            y = ops.linear_columns(xr, self.weights.columns(tuple(names), offsets=offsets), starts[-1])
        else:
            w = self.weights.stacked(tuple(names), offsets=offsets)  # [sum of heights, d_in (+ offsets)]
            y = self._rounded_product(names[0], x, w, lanes=self._lanes((tuple(names), offsets), x))  # [n, sum of heights]
            starts = [0, *itertools.accumulate(heights)]
        out, no_bias = [], True
        for height, bias, start in zip(heights, biases, starts):
            part = y[:, start : start + height]
            b = self.optional(bias) if bias else None
            no_bias = no_bias and b is None
            out.append(self.wrote(part + b if b is not None else part))
        self._hold((tuple(names), tuple(biases)), names, None, no_bias, by_columns, list(zip(starts, heights)),
                   (tuple(names), offsets))
        return out

    def expert_linear(self, name: str, e: int, x: np.ndarray) -> np.ndarray:
        """[n, d_in] -> [n, d_out] through expert e's slice of a stacked expert tensor."""
        if self.exact_products and self.weights.can_pack(name):
            info = self.weights.info(name)
            self._count((name, e), self.group_of(name), self.weights.expert_nbytes(name),
                        info.n_elements // info.shape[2], x.shape[0])
            return self.wrote(quantdot.matmul(x, self.weights.packed_expert(name, e)))
        info = self.weights.info(name)
        kind = FLOAT_KINDS.get(info.ggml_type)
        if self.exact_products and kind is not None:
            self._count((name, e), self.group_of(name), self.weights.expert_nbytes(name),
                        info.n_elements // info.shape[2], x.shape[0])
            w = self.weights.expert(name, e, np.float32)
            return self.wrote(ggml_math.f32_matmul(round_activations(x, kind), w, per_row=True, kind=kind))
        return self.wrote(self._rounded_product(name, x, self.expert(name, e, x.shape[0])))

    def look(self, name: str, layer: int, a: np.ndarray) -> np.ndarray:
        """Show `a` to the probe as llama.cpp's graph tensor NAME-layer (NAME when layer < 0); returns `a`."""
        if self.probe is not None:
            self.probe(f"{name}-{layer}" if layer >= 0 else name, a)
        return a

    def wrote(self, *arrays: np.ndarray) -> np.ndarray:
        """Count arrays an operation produced as activation bytes (`written`); returns the first."""
        self.written += sum(a.nbytes for a in arrays)
        return arrays[0]

    def expert(self, name: str, e: int, n_tokens: int) -> np.ndarray:
        """Expert e's slice of a stacked expert tensor, applied to n_tokens rows."""
        self._read((name, e), self.group_of(name), self.weights.expert_nbytes(name))
        info = self.weights.info(name)
        w = self.weights.expert(name, e, self.product_dtype(name), offsets=self.folds_offsets(name))
        self.flops += 2 * n_tokens * (info.n_elements // info.shape[2])
        return w

    def expert_bias(self, name: str, e: int) -> np.ndarray:
        """Expert e's row of a stacked expert bias (ggml [d_out, n_expert]) -> [d_out]; its bytes once."""
        t = self.weights.info(name)
        self._read((name, e), self.group_of(name), t.nbytes // t.shape[-1])
        return self.weights.get(name)[e]

    def rows(self, name: str, ids: np.ndarray, group: str | None = None) -> np.ndarray:
        """Embedding lookup: one stored row per distinct id."""
        row = row_nbytes(self.weights.info(name))
        g = group or self.group_of(name)
        for i in np.unique(ids).tolist():
            if (name, "row", i) not in self._seen:
                self._row_bytes[name] = self._row_bytes.get(name, 0) + row
            self._read((name, "row", i), g, row)
        return self.weights.rows(name, ids)

    def read_cache(self, nbytes: int, flops: int) -> None:
        """Attention read `nbytes` of cached keys and values and did `flops` with them."""
        self.bytes_by_group["kv_cache"] = self.bytes_by_group.get("kv_cache", 0) + nbytes
        self.flops += flops

    def read_state(self, nbytes: int, flops: int) -> None:
        """A linear-attention layer read its fixed state (`nbytes`, group "state") and did `flops` with it."""
        self.bytes_by_group["state"] = self.bytes_by_group.get("state", 0) + nbytes
        self.flops += flops

    def totals(self) -> dict[str, int]:
        """Bytes by group, plus `total` (weights and KV cache)."""
        out = dict(self.bytes_by_group)
        out["total"] = sum(self.bytes_by_group.values())
        return out

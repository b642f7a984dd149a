"""A pass of many rows through BLAS's matrix-matrix kernel, giving the bits of its matrix-vector kernel.

`ops.linear` multiplies every row of a pass on its own (BLAS's "T" matrix-vector kernel), so a row's result does
not depend on how many rows share its pass. That kernel runs at about 20 G multiply-adds a second here, where a
matrix-matrix product, which reuses each weight over several rows in registers, runs at twice that or more. This
module rebuilds the matrix-vector kernel's sums with matrix-matrix products where this machine's BLAS allows it.

OpenBLAS's Haswell `sgemv_t` (the kernel numpy reaches here, one thread; docs/op-diff.md, fifth and tenth rounds)
keeps one 8-lane register per output and sums the first k & -4 inputs in it, each lane in one fma chain: 4 inputs
first into lanes 0-3 where k & 4, then 8 at a time (lane j the inputs j, j + 8, ... after those 4). The lanes fold as
((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)), and the k & 3 inputs left over are multiplied, summed in order
and added to that at once (measured: every output of 6 x 16 products with k = 592 to 599). A matrix-matrix product
over one lane's inputs (k/8 of them) sums each output in one fma chain too, save a few outputs at the edges of its
blocks, which keep two chains and add them. So:

- the input rows and the matrix are copied lane by lane ([8, n, k/8] and [8, k/8, d_out]), the rows padded with
  zero rows to a whole number of TOKEN_TILE (the kernel's edge tiles along the rows sum otherwise);
- one product per lane, the lanes folded and the leftover inputs added as the matrix-vector kernel does;
- the outputs the matrix-matrix kernel sums another way (`LanePlan.redo`: about 5%, at its block edges) are taken
  again row by row, as `ops.linear` would, and so are the d_out % 4 last, which the matrix-vector kernel sums
  another way (as the last rows of any matrix it is handed).

`linear` takes a matrix BLOCK_ROWS rows at a time. Whether the above holds is not assumed: `plan(d_out, d_in, truth)`
checks it once per matrix shape on random values against the row-by-row product itself, with the shape's own
blocking, and finds the outputs to redo there. Where the lanes do not reproduce that product (another BLAS, another
processor's kernels), the plan is None and `ops.linear` keeps its row-by-row products. Every product through the
lanes also checks the last row of each of its chunks of rows against the row-by-row product (1/n of that cost), and
on any difference drops the plan and returns the row-by-row result. Either way each row gets the same bits whatever
the pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LANES = 8  # float32 lanes of an AVX register: the matrix-vector kernel's partial sums per output
TOKEN_TILE = 12  # rows of a pass padded to a whole number of these (the matrix-matrix kernel's row tiles, 3 x 4)
CHUNK_ROWS = 192  # rows a lane product takes at a time (16 whole tiles)
CALIBRATION_ROWS = (CHUNK_ROWS, 36)  # rows of the random passes a plan is checked with (16 and 3 whole tiles)
ROW_GROUP = 4  # outputs the matrix-vector kernel takes at a time: the d_out % 4 last ones it sums otherwise
BLOCK_ROWS = 1024  # matrix rows a lane product takes at a time (a whole number of `ops.ROW_SLAB`s: the same bits)
MAX_REDO = 1 / 8  # a plan redoing more outputs than this share is not the kernel this module follows

Product = Callable[[np.ndarray, np.ndarray], np.ndarray]  # [n, d_in], [d_out, d_in] -> [n, d_out]
HeldLanes = Callable[[int, np.ndarray], np.ndarray]  # (first row, [rows, d_in] block) -> its `lane_matrix`


@dataclass(frozen=True)
class LanePlan:
    """How a matrix of one shape is multiplied by lanes: the outputs taken again row by row."""

    redo: np.ndarray  # [r] int: output indices the matrix-matrix kernel sums in two chains


_plans: dict[tuple[int, int], LanePlan | None] = {}
_checked = [0, 0.0]  # shapes checked so far in this process, and the seconds it took (one-time work)
_lock = threading.Lock()  # over `_plans` and `_checked`: a shape is checked once, and counted once


def checked() -> tuple[int, float]:
    """(shapes checked, seconds spent checking them) in this process so far: one-time work, as a weight's first
    dequantization is (`Session.feed` times it apart from the pass)."""
    with _lock:
        return _checked[0], _checked[1]


def _split(d_in: int) -> tuple[int, int]:
    """(head, whole) of a row of d_in inputs: the kernel's vector loop takes its first `whole` = d_in & -4 inputs,
    the first `head` (d_in & 4: 0 or 4) of them 4 wide into lanes 0-3, the rest 8 wide; the d_in & 3 after them are
    added in C."""
    whole = d_in & -4
    return whole % LANES, whole


def _lanes(a: np.ndarray, rows: int | None = None) -> np.ndarray:
    """[r, d_in] -> [8, rows, k]: lane j's inputs in the order its fma chain takes them (a 4-wide head first, a zero
    before the other lanes' first so every lane is k long), zero rows up to `rows` (r if None)."""
    r, d_in = a.shape
    head, whole = _split(d_in)
    body = a[:, head:whole].reshape(r, -1, LANES).transpose(2, 0, 1)  # [8, r, (whole - head) / 8]
    if not head and rows in (None, r):
        return np.ascontiguousarray(body)
    out = np.zeros((LANES, rows or r, body.shape[2] + (1 if head else 0)), np.float32)
    out[:, :r, out.shape[2] - body.shape[2] :] = body
    if head:
        out[:head, :r, 0] = a[:, :head].T
    return out


def lane_matrix(w: np.ndarray) -> np.ndarray:
    """[d_out, d_in] -> [8, k, d_out]: the matrix lane by lane as `_lanes` lays out its rows (a 4-wide head first,
    a zero before the other lanes' first), each lane held k-major: the layout the matrix-matrix product reads
    fastest (over 132 rows, 1.24 against 1.51 ms for a 960-output lane product read through the transposed
    layout; the copy itself takes 0.44 against 0.31 ms, measured here)."""
    d_out, d_in = w.shape
    head, whole = _split(d_in)
    body = w[:, head:whole].reshape(d_out, -1, LANES).transpose(2, 1, 0)  # [8, (whole - head) / 8, d_out]
    if not head:
        return np.ascontiguousarray(body)
    out = np.zeros((LANES, body.shape[1] + 1, d_out), np.float32)
    out[:, 1:] = body
    out[:head, 0] = w[:, :head].T
    return out


def _by_lanes(x: np.ndarray, w: np.ndarray, lanes: np.ndarray | None = None) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T -> [n, d_out], the matrix-vector kernel's sums rebuilt from 8 lane products (the
    outputs at the matrix-matrix kernel's block edges not yet redone), CHUNK_ROWS rows at a time (bounding the
    [8, rows, d_out] lane sums). `lanes` is `lane_matrix(w)` where the caller holds it; else it is made here."""
    n, d_in = x.shape
    whole = _split(d_in)[1]
    lanes = lane_matrix(w) if lanes is None else lanes  # [8, k, d_out]
    y = np.empty((n, w.shape[0]), np.float32)
    for r0 in range(0, n, CHUNK_ROWS):
        rows = x[r0 : r0 + CHUNK_ROWS]
        padded = -(-len(rows) // TOKEN_TILE) * TOKEN_TILE
        part = np.matmul(_lanes(rows, padded), lanes)[:, : len(rows)]  # [8, rows, d_out]: a chain per lane, output
        # the fold ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) in place, in three calls
        np.add(part[:4], part[4:], out=part[:4])  # l_j + l_(j+4)
        np.add(part[0:4:2], part[1:4:2], out=part[0:4:2])  # (l0 + l4) + (l1 + l5), (l2 + l6) + (l3 + l7)
        np.add(part[0], part[2], out=y[r0 : r0 + len(rows)])
    if whole < d_in:  # the inputs past the vector loop: products summed in order, then added at once
        rest = x[:, whole, None] * w[:, whole]
        for j in range(whole + 1, d_in):
            rest += x[:, j, None] * w[:, j]
        y += rest
    return y


def plan(d_out: int, d_in: int, truth: Product) -> LanePlan | None:
    """The lane plan for a [d_out, d_in] matrix, checked once per shape against `truth` (the row-by-row product),
    or None where the lanes do not reproduce it."""
    key = (d_out, d_in)
    with _lock:
        if key not in _plans:
            began = time.perf_counter()
            _plans[key] = _calibrate(d_out, d_in, truth)
            _checked[0] += 1
            _checked[1] += time.perf_counter() - began
        return _plans[key]


def _calibrate(d_out: int, d_in: int, truth: Product) -> LanePlan | None:
    """Random passes of CALIBRATION_ROWS rows through both ways: the outputs that differ anywhere are redone; None if
    they are too many, or if the redone result still differs."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((d_out, d_in), dtype=np.float32)
    passes = [rng.standard_normal((n, d_in), dtype=np.float32) for n in CALIBRATION_ROWS]
    wanted = [truth(x, w) for x in passes]
    lanes = [_by_lanes(x, w) for x in passes]
    differ = np.zeros(d_out, bool)
    for got, want in zip(lanes, wanted):
        differ |= np.logical_or.reduce(got != want, axis=0)
    differ[d_out - d_out % ROW_GROUP :] = False  # the last rows are redone apart (`_redo`)
    redo = np.flatnonzero(differ)
    if redo.size > MAX_REDO * d_out:
        return None
    candidate = LanePlan(redo)
    for x, got, want in zip(passes, lanes, wanted):
        if not np.array_equal(_redo(got, x, w, candidate, truth), want):
            return None
    return candidate


def product(x: np.ndarray, w: np.ndarray, lane_plan: LanePlan, truth: Product,
            lanes: np.ndarray | None = None) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T -> [n, d_out] float32 by lanes (`lane_matrix(w)` if given), with the plan's
    outputs redone by `truth`."""
    return _redo(_by_lanes(x, w, lanes), x, w, lane_plan, truth)


def _redo(y: np.ndarray, x: np.ndarray, w: np.ndarray, lane_plan: LanePlan, truth: Product) -> np.ndarray:
    """y [n, d_out] from `_by_lanes` with the outputs it sums otherwise taken by `truth` (in place)."""
    last = w.shape[0] % ROW_GROUP
    if last:  # rows after the kernel's last whole group, which it sums otherwise: as the last of any matrix
        y[:, -last:] = truth(x, w[-last:])
    redo = lane_plan.redo
    if redo.size:  # gathered, then zero rows to a whole number of 8, so none is the kernel's leftover row
        again = np.zeros((-(-redo.size // LANES) * LANES, w.shape[1]), np.float32)
        again[: redo.size] = w[redo]
        y[:, redo] = truth(x, again)[:, : redo.size]
    return y


def checked_product(x: np.ndarray, w: np.ndarray, lane_plan: LanePlan, truth: Product,
                    lanes: np.ndarray | None = None) -> np.ndarray:
    """`product`, the last row of each CHUNK_ROWS (the last of each lane product's row tiles) held to `truth`'s; on
    any difference the shape's plan is dropped and `truth`'s whole product returned (the same bits either way)."""
    y = product(x, w, lane_plan, truth, lanes)
    ends = np.minimum(np.arange(CHUNK_ROWS, len(x) + CHUNK_ROWS, CHUNK_ROWS), len(x)) - 1  # [chunks]
    if np.array_equal(y[ends], truth(x[ends], w)):
        return y
    with _lock:
        _plans[w.shape] = None
    return truth(x, w)


def linear(x: np.ndarray, w: np.ndarray, truth: Product, held: HeldLanes | None = None) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T -> [n, d_out] float32 with `truth`'s bits: BLOCK_ROWS rows of the matrix at a time
    (each block's lane copy a bounded transient: 16 MB for 4,096 inputs, unless `held` keeps it), each block through
    the lanes where its shape has a plan, else through `truth`. A block boundary is a boundary of `truth`'s own row
    slabs, so each block alone gets the bits the whole matrix gets.

    `held(r0, block)` gives the lane copy of the block of rows from r0 (`lane_matrix(block)`), kept from an earlier
    pass where the caller has room for it (`Weights.lanes`): the copy is about a twentieth of a 128-row prefill
    on SmolLM2."""
    y = np.empty((x.shape[0], w.shape[0]), np.float32)
    for r0 in range(0, w.shape[0], BLOCK_ROWS):
        block = w[r0 : r0 + BLOCK_ROWS]
        lane_plan = plan(*block.shape, truth)
        if lane_plan is None:
            y[:, r0 : r0 + len(block)] = truth(x, block)
        else:
            lanes = None if held is None else held(r0, block)
            y[:, r0 : r0 + len(block)] = checked_product(x, block, lane_plan, truth, lanes)
    return y

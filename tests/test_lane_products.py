"""`lane_products`: a pass of many rows through the matrix-matrix kernel gives each row the bits the matrix-vector
kernel gives it alone, or the plan is refused and the rows go one by one (`ops.linear`)."""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest

from walkthrough.engine.glassbox import lane_products, ops


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """Each test checks its shapes afresh (a plan is kept per shape for the process)."""
    monkeypatch.setattr(lane_products, "_plans", {})


def rows_alone(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T one row at a time: a decode pass's product, the bits every pass must give."""
    return np.concatenate([ops.by_row_slabs(row[None], w) for row in x])


# SmolLM2's q/k/v stack and FFN down with Q8_1's block sums folded in (594 = 576 + 18: two inputs past the lanes),
# a Gemma 3 270M stack (640 inputs), inputs past the lanes or a 4-wide head (924 = 896 + 28, Qwen2.5 0.5B's width
# with Q8_1's sums), heights with no whole number of the kernel's row groups, and a matrix taken in blocks of rows
@pytest.mark.parametrize("d_out, d_in", [(960, 594), (576, 1584), (1536, 640), (200, 593), (200, 924),
                                         (200, 599), (999, 594), (333, 256),
                                         (2 * lane_products.BLOCK_ROWS + 99, 130)])
def test_a_pass_through_the_lanes_gives_each_row_its_bits_alone(d_out, d_in):
    rng = np.random.default_rng(d_out + d_in)
    w = rng.standard_normal((d_out, d_in)).astype(np.float32)
    x = rng.standard_normal((150, d_in)).astype(np.float32)
    alone = rows_alone(x, w)
    for n in (ops.LANE_ROWS, ops.LANE_ROWS + 5, 150):
        assert np.array_equal(ops.linear(x[:n], w), alone[:n])
    assert np.allclose(alone, x @ w.T, rtol=1e-4, atol=1e-4 * np.abs(alone).max())  # the same product


def openblas_core() -> str | None:
    """The kernels numpy's OpenBLAS chose at run time ("Haswell", "SkylakeX", ...), or None if not OpenBLAS."""
    found = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "libscipy_openblas*"))
    if not found:
        return None
    get = getattr(ctypes.CDLL(found[0]), "scipy_openblas_get_corename64_", None)
    if get is None:
        return None
    get.restype = ctypes.c_char_p
    return get().decode()


def test_the_haswell_kernels_take_the_lanes():
    """With OpenBLAS's Haswell kernels (this project's machines: the ones docs/op-diff.md measured), the lanes are
    taken and redo only the few outputs at the matrix-matrix kernel's block edges."""
    core = openblas_core()
    if core != "Haswell":
        pytest.skip(f"numpy's BLAS kernels here: {core or 'not OpenBLAS'}")
    plan = lane_products.plan(960, 594, ops.by_row_slabs)
    assert plan is not None and 0 < plan.redo.size <= 960 * lane_products.MAX_REDO


def float64_sums(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A product that sums in float64, rounding once: another order than the matrix-vector kernel's."""
    return (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)


def test_a_product_the_lanes_do_not_rebuild_has_no_plan():
    """Against it the lanes differ nearly everywhere: no plan, so `ops.linear` would keep its rows one by one."""
    assert lane_products.plan(576, 594, float64_sums) is None


def test_a_last_row_that_differs_drops_the_plan_and_gives_the_truth():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((576, 594)).astype(np.float32)
    x = rng.standard_normal((40, 594)).astype(np.float32)
    plan = lane_products.LanePlan(np.arange(0))
    lane_products._plans[w.shape] = plan
    assert not np.array_equal(lane_products.product(x, w, plan, float64_sums)[-1], float64_sums(x, w)[-1])
    assert np.array_equal(lane_products.checked_product(x, w, plan, float64_sums), float64_sums(x, w))
    assert lane_products._plans[w.shape] is None  # dropped: this shape's products go row by row from now on


def test_the_last_row_of_each_chunk_is_checked():
    """A product that differs from the lanes only in the last row of a pass's first chunk of rows (a marked row)
    is found: the plan is dropped and that product's rows come from it."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((576, 594)).astype(np.float32)
    x = rng.standard_normal((lane_products.CHUNK_ROWS + 20, 594)).astype(np.float32)
    x[lane_products.CHUNK_ROWS - 1, 0] = 1000.0  # the marked row

    def marked(rows, m):  # the row-by-row product, one more on the marked row
        return ops.by_row_slabs(rows, m) + (rows[:, :1] == 1000.0)

    plan = lane_products.plan(*w.shape, ops.by_row_slabs)
    if plan is None:
        pytest.skip("no lane plan on this machine's BLAS")
    out = lane_products.checked_product(x, w, plan, marked)
    assert np.array_equal(out, marked(x, w)) and lane_products._plans[w.shape] is None


def test_a_block_of_rows_is_a_whole_number_of_the_row_by_row_slabs():
    """So each block alone gets the bits the whole matrix gets from `ops.by_row_slabs`."""
    assert lane_products.BLOCK_ROWS % ops.ROW_SLAB == 0


def test_lanes_are_read_as_the_matrix_vector_kernel_reads_them():
    w = np.arange(3 * 18, dtype=np.float32).reshape(3, 18)
    lanes = lane_products.lane_matrix(w)  # [8, 2, 3]: the 16 inputs of the lanes; the 2 left over are not there
    assert lanes.shape == (8, 2, 3)
    assert np.array_equal(lanes[5, :, 1], [w[1, 5], w[1, 13]])
    w = np.arange(3 * 23, dtype=np.float32).reshape(3, 23)
    lanes = lane_products.lane_matrix(w)  # 23 inputs: 4 first into lanes 0-3, then 16 by 8, 3 left over
    assert lanes.shape == (8, 3, 3)
    assert np.array_equal(lanes[1, :, 2], [w[2, 1], w[2, 5], w[2, 13]])
    assert np.array_equal(lanes[6, :, 2], [0, w[2, 10], w[2, 18]])  # a zero first: every lane's chain as long

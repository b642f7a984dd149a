"""ggml's float kernels in numpy (`engine.ggml_math`): the fused multiply-add against exact arithmetic, and
`v_expf`'s shortcuts against ggml_v_expf evaluated step by step (vec.h, one fma at a time)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from walkthrough.engine.glassbox import ggml_math as gm

F32 = np.float32


def nearest_f32(q: Fraction) -> np.float32:
    """The float32 nearest to an exact rational, ties to even."""
    f = F32(float(q))
    candidates = [np.nextafter(f, F32(-np.inf)), f, np.nextafter(f, F32(np.inf))]
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - q), int(np.array(v).view(np.int32)) & 1))


def test_fma32_rounds_once_as_exact_arithmetic_does():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 600)).astype(F32)
    c = np.concatenate([
        -(a[:200] * b[:200]) * F32(1 + 1e-6),  # cancellation
        rng.standard_normal(200).astype(F32) * F32(2.0) ** rng.integers(-40, 40, 200).astype(F32),
        np.full(200, 2.0 ** -140, F32),  # subnormal sums
    ]).astype(F32)
    got = gm.fma32(a, b, c)
    want = [nearest_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
    assert np.array_equal(got, np.array(want, F32))


def test_fma32_catches_a_sum_that_float64_rounds_to_a_float32_midpoint():
    # 1 + 2^-24 is halfway between two float32s; 2^-80 more rounds away in exact arithmetic,
    # but float64 drops it and then rounds the tie to even (down to 1).
    a, b, c = F32(1 + 2.0 ** -23), F32(1 + 2.0 ** -23), F32(-(2.0 ** -23))
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    assert gm.fma32(a, b, c) == nearest_f32(exact)


def _fma(a, b, c):
    p = np.multiply(a, b, dtype=np.float64)
    return gm._fma32_exact(p, np.broadcast_to(np.asarray(c, np.float64), p.shape))


def v_expf_step_by_step(x: np.ndarray) -> np.ndarray:
    """ggml_v_expf (vec.h, __m256) one instruction at a time, every fma exact."""
    r, log2e = F32(float.fromhex("0x1.8p23")), F32(float.fromhex("0x1.715476p+0"))
    z = _fma(x, log2e, r)
    n = z - r
    b = _fma(-n, gm._LN2_LO, _fma(-n, gm._LN2_HI, x))
    e = z.view(np.uint32) << np.uint32(23)
    k = (e + np.uint32(0x3F800000)).view(F32)
    c = np.abs(n) > 126
    u = b * b
    p = gm._P
    j = _fma(_fma(_fma(p[0], b, p[1]), u, _fma(p[2], b, p[3])), u, p[4] * b)
    g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0))
    s1 = (g + np.uint32(0x7F000000)).view(F32)
    s2 = (e - g).view(F32)
    with np.errstate(over="ignore", under="ignore"):
        return np.where(np.abs(n) > 192, s1 * s1, np.where(c, _fma(s2, j, s2) * s1, _fma(k, j, k)))


def test_v_expf_equals_ggml_v_expf_step_by_step():
    rng = np.random.default_rng(2)
    x = np.concatenate([
        rng.uniform(-30, 10, 20000), rng.uniform(-104, -80, 2000), rng.uniform(80, 89, 200),
        [0.0, -0.0, 1e-30, -1e-30, -np.inf, 88.7, -87.3, 0.5 * np.log(2), -0.5 * np.log(2)],
    ]).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.array_equal(gm.v_expf(x), v_expf_step_by_step(x), equal_nan=True)
    assert gm.v_expf(F32([-np.inf]))[0] == 0


def test_v_expf_is_close_to_exp():
    x = np.linspace(-80, 80, 10001, dtype=F32)
    assert np.max(np.abs(gm.v_expf(x) / np.exp(x.astype(np.float64)) - 1)) < 3e-7


def test_soft_max_rows_sum_in_eights_then_in_double():
    x = np.float32([[0.0, 1.0, 2.0, -np.inf, 0.5, 0.25, 3.0, 1.5, 2.5, -1.0]])  # 8 + a tail of 2
    e = gm.v_expf(x[:, :8] - F32(3.0))
    tail = np.float32([gm.libm.expf(F32(2.5 - 3.0)), gm.libm.expf(F32(-4.0))])
    total = float(gm.hsum8(e)[0]) + float(tail[0]) + float(tail[1])
    want = np.concatenate([e[0], tail]) * F32(1.0 / total)
    assert np.array_equal(gm.soft_max_rows(x)[0], want)


def test_rms_scale_sums_squares_in_order_in_double():
    x = np.float32([[3.0, 4.0, 1e-4]])
    mean = F32((9.0 + 16.0 + float(F32(1e-4) * F32(1e-4))) / 3)
    assert gm.rms_scale(x, 1e-5)[0, 0] == F32(1) / np.sqrt(mean + F32(1e-5))


@pytest.mark.parametrize("shape", [(1, 576), (2, 5), (3, 4, 16), (3, 40, 64), (128, 576), (7, 1), (5, 2), (0, 4), (3, 0)])
def test_sum_in_order_adds_each_row_from_first_to_last(shape):
    rng = np.random.default_rng(shape[-1])
    a = rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 17, shape)  # sums whose order shows in the bits
    want = np.zeros(shape[:-1])
    for index in np.ndindex(*shape[:-1]):
        total = 0.0
        for value in a[index]:
            total += float(value)  # Python floats: one float64 rounding per addition, in order
        want[index] = total
    assert np.array_equal(gm.sum_in_order(a), want)
    if shape == (128, 576):  # numpy's own sum (pairwise) gives other bits here, so the check above can fail
        assert not np.array_equal(np.add.reduce(a, axis=-1), want)


@pytest.mark.parametrize("shape", [(2, 3, 8), (96, 16, 8)])  # a few registers, and MANY values (summed lane by lane)
def test_hsum8_adds_a_register_in_ggml_s_order(shape):
    rng = np.random.default_rng(shape[0])
    v = (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)).astype(F32)
    want = np.empty(shape[:-1], F32)
    for index in np.ndindex(*shape[:-1]):
        r = v[index]
        want[index] = ((r[0] + r[4]) + (r[2] + r[6])) + ((r[1] + r[5]) + (r[3] + r[7]))  # float32 scalars
    assert np.array_equal(gm.hsum8(v), want)
    spread = np.zeros((*shape[:-1], 16), F32)
    spread[..., ::2] = v
    assert np.array_equal(gm.hsum8(spread[..., ::2]), want)  # a strided view: the same sums


def test_the_gelu_table_is_built_without_a_numpy_warning(monkeypatch):
    """Building the table covers F16's infinities and NaNs on purpose; that must not print 'RuntimeWarning:
    invalid value encountered in multiply' under a user's `walkthrough trace` on a GELU model (Gemma 3 did)."""
    import warnings

    monkeypatch.setattr(gm, "_GELU_TABLE", [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = gm.gelu_table()
    assert table.shape == (1 << 16,) and np.isnan(table).any() and table[0] == 0

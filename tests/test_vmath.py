"""vmath.h's accuracy claims, against float64, for every copy of the vector code on
this machine (the `isa` fixture: the baseline under MINIRT_MAX_CPU_ISA=sse, AVX2 +
FMA under =avx2, and AVX-512F where the build and CPU have it): exp, sigmoid,
SiLU, tanh, erf, Gelu (both forms), Mish and HardSwish on a dense grid over the
range networks feed them, the extremes, NaN and infinities, and on short rows (1
to 49 floats) that take the tails: the padded vector below one vector, the
overlapping last vector above; and the row loops (Softmax, LogSoftmax,
LayerNormalization) on rows of every tail length."""

from __future__ import annotations

import math

import numpy as np
import pytest

import models

testing = pytest.importorskip("minibuild.testing")

ISAS = ["sse", "avx2", None]
FLT_MIN = float(np.finfo(np.float32).tiny)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


# (op, attrs, opset, float64 reference, relative bound, grid) per function; the
# bounds are the ones vmath.h's header states.
FUNCS = {
    "exp": ("Exp", {}, 17, np.exp, 2e-7, (-104, 88.7)),
    "sigmoid": ("Sigmoid", {}, 17, _sigmoid, 2.7e-7, (-90, 30)),
    "silu": ("SiLU", {}, 17, lambda x: x * _sigmoid(x), 3e-7, (-90, 30)),
    "tanh": ("Tanh", {}, 17, np.tanh, 3.3e-7, (-12, 12)),
    "erf": ("Erf", {}, 17, _erf, 2.5e-7, (-5, 5)),
    "gelu": ("Gelu", {}, 20, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), 2e-6, (-6, 6)),
    "gelu_tanh": ("Gelu", {"approximate": "tanh"}, 20,
                  lambda x: x * _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)), 7e-6, (-8, 8)),
    "mish": ("Mish", {}, 18, lambda x: x * np.tanh(np.log1p(np.exp(np.minimum(x, 40)))), 3.8e-7, (-30, 25)),
    "hardswish": ("HardSwish", {}, 17, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), 1.2e-7, (-8, 8)),
}


def run(name, x):
    op, attrs, opset, _, _, _ = FUNCS[name]
    if op == "SiLU":  # x * Sigmoid(x): the build fuses it into ai.minibuild's SiLU
        from onnx import TensorProto, helper
        nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y0"])]
        graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info("y0", TensorProto.FLOAT, x.shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
    else:
        model = models.with_output_shapes(models.one_node(op, {"x": x}, opset=opset, **attrs))
    (got,) = testing.run_with_minirt(model, {"x": x})
    assert got.shape == x.shape and got.dtype == np.float32
    return got


def check_accuracy(name, x, got):
    _, _, _, ref, bound, _ = FUNCS[name]
    want = ref(x.astype(np.float64))
    if name == "hardswish":  # x/6 + 1/2 cancels near -3: absolute, scaled by |x|
        assert np.all(np.abs(got - want) <= bound * 2 * np.maximum(1.0, np.abs(x)))
        return
    if name in ("sigmoid", "silu"):  # relative where sigmoid(x) is a normal float
        normal, tiny = (x > -87.3) & (want != 0), FLT_MIN * np.maximum(1.0, np.abs(x))
    elif name == "gelu":
        normal, tiny = np.abs(want) >= 1e-6, 2e-6
    else:
        normal, tiny = np.abs(want) >= FLT_MIN, FLT_MIN
    # (exact zeros in: silu(+-0), erf(0): checked absolutely)
    rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    worst = int(np.argmax(rel)) if rel.size else 0
    assert rel.size == 0 or rel[worst] <= bound, (name, float(x[normal][worst]), float(rel[worst]))
    # Below: absolutely tiny, never a stray value.
    tiny = np.broadcast_to(tiny, x.shape)[~normal]
    assert np.all(np.abs(got[~normal].astype(np.float64) - want[~normal]) <= tiny)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_accuracy_against_float64(name, isa):
    lo, hi = FUNCS[name][5]
    # Not a multiple of 16: the last vector overlaps the one before it.
    x = np.linspace(lo, hi, 200003, dtype=np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3])])
    check_accuracy(name, x, run(name, x))


# The limits at the extremes and through NaN, per function (NaN must stay NaN).
LIMITS = {
    "exp": {-np.inf: 0.0, np.inf: np.inf, -200.0: 0.0, 100.0: np.inf},
    "sigmoid": {-np.inf: 0.0, np.inf: 1.0, -200.0: 0.0, 200.0: 1.0},
    "silu": {np.inf: np.inf, -200.0: 0.0, 200.0: 200.0, -1e30: 0.0},
    "tanh": {-np.inf: -1.0, np.inf: 1.0, -50.0: -1.0, 50.0: 1.0},
    "erf": {-np.inf: -1.0, np.inf: 1.0, -10.0: -1.0, 10.0: 1.0},
    "gelu": {np.inf: np.inf, -50.0: 0.0, 50.0: 50.0},
    "gelu_tanh": {-50.0: 0.0, 50.0: 50.0},
    "mish": {np.inf: np.inf, 100.0: 100.0},
    "hardswish": {np.inf: np.inf, -4.0: 0.0, 4.0: 4.0},  # -inf * 0: NaN, as the formula says
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_extremes_and_nan(name, isa):
    keys = list(LIMITS[name])
    # Each special value at every lane position of a 16-float vector and in a tail.
    x = np.full(16 * len(keys) + 5, 0.5, np.float32)
    want = np.full(x.shape, FUNCS[name][3](np.float64(0.5)))
    for i, k in enumerate(keys):
        x[i::len(keys) + 1] = k
        want[i::len(keys) + 1] = LIMITS[name][k]
    x[-1], want[-1] = np.nan, np.nan
    got = run(name, x).astype(np.float64)
    assert np.isnan(got[-1])
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=3e-7, atol=0)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("n", [1, 5, 8, 15, 16, 17, 31, 33, 49])
def test_short_rows_take_the_tails(n, isa):
    # Several rows of n in one tensor are one call; a single row of n is its own
    # tail: under one vector (a padded copy) or just over (the overlapping store).
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((1, n)) * 4).astype(np.float32)
    for name in ("sigmoid", "silu", "exp", "gelu", "hardswish"):
        check_accuracy(name, x.ravel(), run(name, x).ravel())


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", [(3, 5), (4, 49), (2, 128), (1, 1000), (7, 17)])
def test_softmax_rows_against_float64(shape, isa):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    x[0, 0] = -np.inf  # a masked position: exactly 0
    model = models.with_output_shapes(models.one_node("Softmax", {"x": x}, opset=13, axis=-1))
    (got,) = testing.run_with_minirt(model, {"x": x})
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    want = e / e.sum(axis=-1, keepdims=True)
    assert got[0, 0] == 0.0
    keep = want >= FLT_MIN
    # x - max rounds to float first: up to 0.5 ulp of |x - max| (~40 here) in exp's argument.
    assert np.max(np.abs(got[keep] - want[keep]) / want[keep]) < 4e-6
    assert np.all(got[~keep] <= FLT_MIN)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", [(3, 5), (2, 49), (4, 128), (1, 1000)])
def test_logsoftmax_rows_against_float64(shape, isa):
    rng = np.random.default_rng(sum(shape) + 1)
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    model = models.with_output_shapes(models.one_node("LogSoftmax", {"x": x}, opset=13, axis=-1))
    (got,) = testing.run_with_minirt(model, {"x": x})
    x64 = x.astype(np.float64)
    z = x64 - x64.max(axis=-1, keepdims=True)
    want = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    assert np.max(np.abs(got - want)) < 4e-6 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("d", [1, 5, 16, 33, 49, 256, 768])
def test_layernorm_rows_against_float64(d, isa):
    # Rows of every tail length around 8 and 16 lanes, an offset mean (the two-pass
    # variance), with and without B; Mean and InvStdDev outputs too.
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((3, d)) * 2 + 7).astype(np.float32)
    g = (rng.standard_normal(d) * 0.2 + 1).astype(np.float32)
    b = (rng.standard_normal(d) * 0.1).astype(np.float32)
    x64 = x.astype(np.float64)
    m = x64.mean(axis=-1, keepdims=True)
    inv = 1 / np.sqrt(((x64 - m) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    for consts in ({"g": g, "b": b}, {"g": g}):
        model = models.with_output_shapes(models.one_node("LayerNormalization", {"x": x}, consts, n_out=3,
                                                          epsilon=1e-5))
        y, mean, invstd = testing.run_with_minirt(model, {"x": x})
        want = (x64 - m) * inv * g + (b if "b" in consts else 0)
        assert np.max(np.abs(y - want)) < 2e-6 * max(1.0, float(np.abs(want).max())), d
        np.testing.assert_allclose(mean.reshape(m.shape), m, rtol=1e-6)
        np.testing.assert_allclose(invstd.reshape(inv.shape), inv, rtol=1e-6)

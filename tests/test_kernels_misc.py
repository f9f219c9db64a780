"""Focused checks of the float32 elementwise, pooling, normalisation and
data-movement kernels against onnxruntime: broadcast shapes, odd sizes,
negative axes, ceil-mode pools, legacy opsets. Each case is a one-node model
run through the whole pipeline (optimise, convert, minirt)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from models import with_output_shapes

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(1234)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def one_node(op, feeds, consts=None, opset=17, n_out=1, **attrs):
    return with_output_shapes(models.one_node(op, feeds, consts, opset, n_out, **attrs))


def check(model, feeds, rtol=1e-5, atol=1e-5):
    models.assert_matches_onnxruntime(model, feeds, rtol, atol)


# --- elementwise binary with broadcasting ---------------------------------------------

BCAST_SHAPES = [
    ((2, 3, 5, 7), (2, 3, 5, 7)),      # same shape
    ((1, 3, 4, 5), (3, 1, 1)),         # per-channel bias
    ((1, 3, 4, 5), (1, 3, 1, 1)),
    ((2, 3), ()),                       # scalar
    ((), (4, 5)),                       # scalar on the left
    ((3, 1, 5), (1, 4, 1)),             # both sides broadcast
    ((5,), (2, 3, 5)),                  # rank difference, a smaller
    ((1, 17, 1, 33), (1, 1, 9, 1)),     # odd sizes
    ((2, 1, 3, 1, 4, 1), (1, 5, 1, 2, 1, 3)),  # rank 6, alternating
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa,sb", BCAST_SHAPES)
def test_binary_broadcast(op, sa, sb):
    a, b = randn(*sa), randn(*sb)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 1.0, b).astype(np.float32)
    check(one_node(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_add_constant_channel_bias():
    x, b = randn(1, 8, 6, 6), randn(8, 1, 1)
    check(one_node("Add", {"x": x}, {"b": b}), {"x": x})


def test_mul_legacy_axis_broadcast():
    # Opset 6: b of shape (3,) aligned with axis 1 of a (2, 3, 4, 5).
    a, b = randn(2, 3, 4, 5), randn(3)
    model = one_node("Mul", {"a": a, "b": b}, opset=6, broadcast=1, axis=1)
    got = testing.run_with_minirt(model, {"a": a, "b": b})[0]
    np.testing.assert_allclose(got, a * b.reshape(1, 3, 1, 1), rtol=1e-6)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(2, 3, 4), (3, 1), (1, 4)], [(4,), (2, 4), (3, 1, 1), (4,)]])
def test_variadic(op, shapes):
    feeds = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}
    check(one_node(op, feeds), feeds)


# --- unary ----------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Neg", {}), ("Abs", {}),
    ("LeakyRelu", {"alpha": 0.2}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
    ("Identity", {}),
])
def test_unary(op, attrs):
    x = randn(3, 37) * 4
    check(one_node(op, {"x": x}, **attrs), {"x": x})


def test_sqrt():
    x = np.abs(randn(5, 7)) + 0.01
    check(one_node("Sqrt", {"x": x}), {"x": x})


@pytest.mark.parametrize("lo,hi", [(-1.0, 1.0), (0.0, 6.0), (None, 0.5), (-0.5, None), (2.0, 1.0)])
def test_clip_constant_limits(lo, hi):
    x = randn(2, 3, 11) * 3
    consts, names = {}, ["x"]
    for name, v in (("lo", lo), ("hi", hi)):
        if v is None:
            names.append("")
        else:
            consts[name] = np.array(v, np.float32)
            names.append(name)
    node = helper.make_node("Clip", names, ["y0"])
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    check(with_output_shapes(model), {"x": x})


def test_clip_opset6_attributes():
    x = randn(4, 9) * 3
    check(one_node("Clip", {"x": x}, opset=6, min=-0.5, max=1.5), {"x": x})


def test_dropout_inference_copies():
    x = randn(2, 5, 3)
    check(one_node("Dropout", {"x": x}, opset=13), {"x": x})


# --- pooling --------------------------------------------------------------------------

@pytest.mark.parametrize("shape,attrs", [
    ((1, 8, 15, 15), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 8, 16, 16), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 14, 13), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 0, 2], ceil_mode=1)),
    ((1, 2, 11, 11), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 4], strides=[3, 2], auto_pad="SAME_LOWER")),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 3], auto_pad="VALID")),
    ((2, 3, 19), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ((1, 2, 6, 7, 8), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 3], pads=[0, 1, 1, 1, 0, 1])),
    ((1, 3, 13, 17), dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[1, 2], pads=[1, 2, 0, 1])),
    ((1, 4, 9, 40), dict(kernel_shape=[2, 4], strides=[2, 2], pads=[0, 3, 1, 3])),
    # Stride 1 in H and W takes the flat form (padded plane, one vector run).
    ((1, 6, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((2, 3, 5, 9), dict(kernel_shape=[2, 4], pads=[0, 3, 1, 0], dilations=[2, 1])),
    ((1, 4, 7, 7), dict(kernel_shape=[7, 7])),
    ((1, 3, 6, 5), dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER")),
    ((1, 2, 23), dict(kernel_shape=[5], pads=[2, 4])),
])
def test_maxpool(shape, attrs):
    x = randn(*shape)
    check(one_node("MaxPool", {"x": x}, opset=12, **attrs), {"x": x})


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape,attrs", [
    ((1, 4, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 14, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0], ceil_mode=1)),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((2, 3, 19), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ((1, 2, 6, 7, 8), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 3], pads=[1, 1, 0, 0, 1, 1])),
    # The flat form (stride 1 in H and W): per-output divisors at the borders.
    ((1, 6, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((2, 3, 5, 9), dict(kernel_shape=[3, 4], pads=[2, 3, 1, 0])),
    ((1, 3, 9, 8), dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER")),
    ((1, 5, 7, 7), dict(kernel_shape=[7, 7])),
    ((1, 2, 23), dict(kernel_shape=[5], pads=[2, 4], strides=[1])),
])
def test_averagepool(shape, attrs, include_pad):
    x = randn(*shape)
    check(one_node("AveragePool", {"x": x}, opset=11, count_include_pad=include_pad, **attrs), {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 3, 5), (1, 2, 3, 4, 5), (1, 5, 1, 1)])
def test_global_pool(op, shape):
    x = randn(*shape)
    check(one_node(op, {"x": x}), {"x": x})


# --- softmax, normalisation -------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (11, 0), (13, 1), (13, -1), (13, 0), (13, -3)])
def test_softmax(op, opset, axis):
    x = randn(2, 3, 5) * 5
    check(one_node(op, {"x": x}, opset=opset, axis=axis), {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 6), (3, 2, 7)])
def test_batchnorm(shape):
    c = shape[1]
    x = randn(*shape)
    consts = {"s": randn(c), "b": randn(c), "m": randn(c), "v": np.abs(randn(c)) + 0.1}
    check(one_node("BatchNormalization", {"x": x}, consts, opset=15, epsilon=1e-3), {"x": x})


def test_instancenorm():
    x = randn(2, 3, 4, 5)
    check(one_node("InstanceNormalization", {"x": x}, {"s": randn(3), "b": randn(3)}, epsilon=1e-4), {"x": x})


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    x = randn(2, 7, 3, 4)
    check(one_node("LRN", {"x": x}, size=size, alpha=0.001, beta=0.6, bias=1.5), {"x": x}, rtol=1e-4)


def test_lrn_even_size():
    # onnxruntime rejects even sizes (and onnx.reference's LRN loops over the batch
    # axis), so this checks the spec's formula directly: the window is
    # [c - floor((size-1)/2), c + ceil((size-1)/2)].
    x = randn(2, 6, 2, 3)
    size, alpha, beta, bias = 4, 0.01, 0.75, 1.0
    model = one_node("LRN", {"x": x}, size=size, alpha=alpha, beta=beta, bias=bias)
    sq = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + -(-(size - 1) // 2) + 1)
        sq[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    want = x / (bias + alpha / size * sq) ** beta
    got = testing.run_with_minirt(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


# --- shape and data movement ----------------------------------------------------------

@pytest.mark.parametrize("xs,shape", [((2, 3, 4), [0, -1]), ((2, 3, 4), [4, 0, -1]), ((6,), [2, 1, 3]), ((1, 8, 1, 1), [-1])])
def test_reshape(xs, shape):
    x = randn(*xs)
    check(one_node("Reshape", {"x": x}, {"s": np.array(shape, np.int64)}, opset=14), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_flatten(axis):
    x = randn(2, 3, 4)
    check(one_node("Flatten", {"x": x}, opset=13, axis=axis), {"x": x})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_negative_axes(opset):
    x = randn(1, 3, 1, 4)
    if opset >= 13:
        sq = one_node("Squeeze", {"x": x}, {"a": np.array([-2, 0], np.int64)}, opset=opset)
        un = one_node("Unsqueeze", {"x": x}, {"a": np.array([-1, 1], np.int64)}, opset=opset)
    else:
        sq = one_node("Squeeze", {"x": x}, opset=opset, axes=[-2, 0])
        un = one_node("Unsqueeze", {"x": x}, opset=opset, axes=[-1, 1])
    check(sq, {"x": x})
    check(un, {"x": x})


@pytest.mark.parametrize("shape,perm", [
    ((33, 70), [1, 0]),
    ((2, 5, 6, 7), [0, 2, 3, 1]),
    ((2, 5, 6, 7), [0, 3, 1, 2]),
    ((2, 5, 6, 7), [3, 2, 1, 0]),
    ((2, 3, 1, 4, 2, 3), [5, 0, 3, 2, 4, 1]),
    ((4, 1, 5), None),
])
def test_transpose(shape, perm):
    x = randn(*shape)
    attrs = {} if perm is None else {"perm": perm}
    check(one_node("Transpose", {"x": x}, **attrs), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] += i
    feeds = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}
    check(one_node("Concat", feeds, axis=axis), feeds)


def test_split():
    x = randn(2, 9, 3)
    check(one_node("Split", {"x": x}, {"s": np.array([2, 3, 4], np.int64)}, opset=13, n_out=3, axis=-2), {"x": x})
    check(one_node("Split", {"x": x}, opset=18, n_out=3, axis=1, num_outputs=3), {"x": x})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    x = randn(2, 3, 5, 6)
    pads = np.array([0, 1, 2, 3, 0, 0, 1, -1], np.int64)  # negative pads crop first
    consts = {"p": pads}
    if mode == "constant":
        consts["v"] = np.array(1.5, np.float32)
    check(one_node("Pad", {"x": x}, consts, opset=19, mode=mode), {"x": x})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 10], [0, 2], [1, 2]),
    ([-1], [-100], [1], [-1]),
    ([10, -3], [0, 2**62], [2, -1], [-3, 1]),
    ([0], [0], [0], [1]),
])
def test_slice(starts, ends, axes, steps):
    x = randn(4, 5, 6, 7)
    consts = {k: np.array(v, np.int64) for k, v in zip("seap", (starts, ends, axes, steps))}
    check(one_node("Slice", {"x": x}, consts, opset=13), {"x": x})

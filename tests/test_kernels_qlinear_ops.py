"""com.microsoft QLinearConcat and QLinearAveragePool against onnxruntime, one node at
a time, uint8 and int8. Both requantise as onnxruntime does (QLinearConcat: a table
of dequantise-then-quantise per piece, a plain copy where a piece has the output's
parameters; QLinearAveragePool: float sums of the dequantised taps in row-major
order, divided by the count, quantised with round half to even), so outputs must
agree exactly: a difference of one step fails, naming its place."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild.testing import run_with_minirt

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(11)
NP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
TYPES = [np.uint8, np.int8]


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dt)


def _model(op, inputs: dict, consts: dict, order: list, out_shape, out_type, **attrs):
    node = helper.make_node(op, order, ["y"], domain="com.microsoft", **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, NP[v.dtype.type], v.shape)
                                       for k, v in inputs.items()],
                          [helper.make_tensor_value_info("y", out_type, out_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _check(model, feeds):
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = run_with_minirt(model, feeds)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    assert diff.max() == 0, f"max difference {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}"
    return got


def _scale(lo=0.01, hi=0.1):
    return np.array(RNG.uniform(lo, hi), np.float32)


def _concat(t, shapes, axis, params):
    """QLinearConcat of pieces of `shapes`; params: [(scale, zp)] per piece, then the output's."""
    inputs, consts = {}, {"ys": params[-1][0], "yz": params[-1][1]}
    order = ["ys", "yz"]
    for i, (shape, (s, z)) in enumerate(zip(shapes, params)):
        inputs[f"x{i}"] = _q(shape, t)
        consts[f"s{i}"], consts[f"z{i}"] = s, z
        order += [f"x{i}", f"s{i}", f"z{i}"]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return _model("QLinearConcat", inputs, consts, order, out, NP[t], axis=axis), inputs


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("axis, shapes", [(1, [(1, 4, 5, 5), (1, 3, 5, 5), (1, 6, 5, 5)]),
                                          (3, [(2, 3, 4, 2), (2, 3, 4, 7)]),
                                          (0, [(2, 9), (5, 9)])])
def test_qlinearconcat_per_input_scales(t, axis, shapes):
    params = [(_scale(), _q((), t)) for _ in shapes] + [(_scale(0.05, 0.2), _q((), t))]
    model, feeds = _concat(t, shapes, axis, params)
    _check(model, feeds)


@pytest.mark.parametrize("t", TYPES)
def test_qlinearconcat_equal_parameters_is_a_copy(t):
    s, z = np.array(0.037, np.float32), _q((), t)
    model, feeds = _concat(t, [(1, 3, 4, 4), (1, 5, 4, 4)], 1, [(s, z), (s, z), (s, z)])
    got = _check(model, feeds)
    np.testing.assert_array_equal(got, np.concatenate([feeds["x0"], feeds["x1"]], axis=1))


@pytest.mark.parametrize("t", TYPES)
def test_qlinearconcat_mixed_copy_and_requantised(t):
    # one piece shares the output's parameters, one saturates (a larger scale), one has a negative axis
    s, z = np.array(0.02, np.float32), _q((), t)
    params = [(s, z), (np.array(0.09, np.float32), _q((), t)), (np.array(0.005, np.float32), z), (s, z)]
    model, feeds = _concat(t, [(2, 8, 3), (2, 8, 2), (2, 8, 4)], 2, params)
    _check(model, feeds)
    neg = helper.make_attribute("axis", -1)
    model.graph.node[0].attribute[0].CopyFrom(neg)
    _check(model, feeds)


def _pool(t, shape, out_type=None, **attrs):
    x = _q(shape, t)
    consts = {"xs": _scale(), "xz": _q((), t), "ys": _scale(0.005, 0.05), "yz": _q((), t)}
    model = _model("QLinearAveragePool", {"x": x}, consts, ["x", "xs", "xz", "ys", "yz"], None, NP[t], **attrs)
    # the output shape comes from onnxruntime, so a wrong shape function fails the comparison
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": x})[0].shape
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", NP[t], out))
    return model, {"x": x}


POOLS = [
    ((1, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 4, 8, 8), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 0, 1, 2], ceil_mode=1, count_include_pad=1)),
    ((1, 5, 13), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ((2, 3, 12), dict(kernel_shape=[3], strides=[2], ceil_mode=1, count_include_pad=1, pads=[1, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    ((1, 4, 7, 7), dict(kernel_shape=[7, 7])),                 # onnxruntime's global-average path
    ((1, 4, 9, 9), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 4, 9, 9), dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER", strides=[2, 2], count_include_pad=1)),
    ((1, 4, 9, 9), dict(kernel_shape=[3, 3], auto_pad="VALID", strides=[2, 2])),
]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape, attrs", POOLS, ids=[f"{len(s) - 2}d-{i}" for i, (s, _) in enumerate(POOLS)])
def test_qlinearaveragepool(t, shape, attrs):
    model, feeds = _pool(t, shape, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape, attrs", [((1, 9, 11, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                          ((2, 12, 5), dict(kernel_shape=[3], pads=[1, 1], count_include_pad=1)),
                                          ((1, 6, 6, 3), dict(kernel_shape=[6, 6]))])
def test_qlinearaveragepool_channels_last(t, shape, attrs):
    model, feeds = _pool(t, shape, channels_last=1, **attrs)
    _check(model, feeds)


def test_qlinearaveragepool_bad_pads_named():
    x = _q((1, 2, 6, 6), np.uint8)
    consts = {"xs": _scale(), "xz": _q((), np.uint8), "ys": _scale(), "yz": _q((), np.uint8)}
    model = _model("QLinearAveragePool", {"x": x}, consts, ["x", "xs", "xz", "ys", "yz"], [1, 2, 8, 8],
                   TensorProto.UINT8, kernel_shape=[2, 2], pads=[2, 2, 2, 2])
    with pytest.raises(Exception) as e:
        run_with_minirt(model, {"x": x})
    assert "pads" in str(e.value) and "kernel" in str(e.value), str(e.value)

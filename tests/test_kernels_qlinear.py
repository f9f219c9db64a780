"""The quantised kernels against onnxruntime, one node at a time, on the cases ONNX's
node tests do not reach: depthwise and grouped QLinearConv with per-channel weight
scales/zero points, strides, pads and int32 bias; QLinearMatMul with per-column
weights; and the com.microsoft QGemm, QLinearAdd (broadcasting), QLinearMul,
QLinearGlobalAveragePool, QLinearSigmoid and QLinearLeakyRelu. The requantisation
is onnxruntime's (float scale, round half to even, saturation), so outputs must agree
exactly; a difference of one step is reported as a failure with its place.
(ONNX's own QLinearConv/QLinearMatMul cases run in test_conformance.py -k qlinear.)"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref
from minibuild.testing import run_with_minirt

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(3)
NP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT}


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dt)


def _model(op, inputs, consts, out_shape, out_type, domain="", **attrs):
    """One node; `inputs` (name -> array) become graph inputs, `consts` initializers ('' = omitted)."""
    names = list(inputs) + list(consts)
    order = attrs.pop("_order")
    node = helper.make_node(op, order, ["y"], domain=domain or None, **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, NP[v.dtype.type], v.shape) for k, v in inputs.items()],
                          [helper.make_tensor_value_info("y", out_type, out_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    del names
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)] if domain else [])
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def _check(model, feeds):
    ref = ortref.reference_session(model).run(None, feeds)[0]
    got = run_with_minirt(model, feeds)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64)) if ref.dtype != np.float32 else np.abs(got - ref)
    tol = 0 if ref.dtype != np.float32 else 1e-5 * max(1.0, float(np.abs(ref).max()))
    assert diff.max() <= tol, f"max difference {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}"


def _scale(n=None):
    return (RNG.uniform(0.005, 0.05, size=n) if n else np.array(RNG.uniform(0.01, 0.1))).astype(np.float32)


@pytest.mark.parametrize("xt, wt", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("c, m, group, k, stride, pad", [
    (8, 16, 1, 3, 1, 1), (16, 16, 16, 3, 2, 1), (12, 6, 3, 1, 1, 0), (5, 7, 1, 5, 2, 2),
    (8, 8, 8, 3, 1, 1), (8, 16, 8, 3, 1, 0), (6, 6, 6, 5, 1, 2)])
def test_qlinearconv(xt, wt, c, m, group, k, stride, pad):
    x = _q((1, c, 9, 11), xt)
    w = _q((m, c // group, k, k), wt)
    h, wd = (9 + 2 * pad - k) // stride + 1, (11 + 2 * pad - k) // stride + 1
    consts = {"xs": _scale(), "xz": _q((), xt), "w": w, "ws": _scale(m),
              "wz": np.zeros(m, wt) if wt == np.int8 else _q((m,), wt),
              "ys": np.array(0.2, np.float32), "yz": _q((), xt), "b": RNG.integers(-500, 500, m).astype(np.int32)}
    model = _model("QLinearConv", {"x": x}, consts, [1, m, h, wd], NP[xt], group=group, strides=[stride] * 2,
                   pads=[pad] * 4, _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"])
    _check(model, {"x": x})


ISAS = [None, "avx512vnni", "avxvnni", "avx2", "sse"]  # qgemm families on x86_64: best (AMX here), AVX512-VNNI, AVX-VNNI, AVX2, SSE


# (c, m, group, k, stride, pad, dilation, h, w): full and partial GEMM panels and tiles, a
# 1x1 stride-1 read in place and a 1x1 stride 2, a 7x7 stride-2 stem (four stride phases),
# dilation, groups, depthwise at stride 1 and 2 down to a 2x2 plane, and small planes
# of more channels than one requantisation block
CONV_SHAPES = [(32, 40, 1, 3, 1, 1, 1, 16, 16), (16, 24, 1, 1, 1, 0, 1, 20, 20), (16, 24, 1, 1, 2, 0, 1, 15, 17),
               (3, 16, 1, 7, 2, 3, 1, 37, 29), (8, 16, 1, 3, 1, 2, 2, 13, 12), (16, 32, 4, 3, 2, 1, 1, 14, 15),
               (24, 24, 24, 3, 2, 1, 1, 33, 31), (40, 40, 40, 3, 1, 1, 1, 2, 2), (16, 16, 16, 5, 1, 4, 2, 19, 9),
               (130, 130, 130, 3, 2, 1, 1, 5, 5),
               # 1x1 at k >= 64: 24 rows (AMX hosts pick AVX512-VNNI for 32 rows or fewer) and 33 (AMX, a
               # one-row last tile)
               (96, 24, 1, 1, 1, 0, 1, 9, 11), (96, 33, 1, 1, 1, 0, 1, 9, 11),
               # uint8 x int8 on AVX512-VNNI hosts read channel quads in place, pixels as the
               # tile's rows: 49 pixels in 7-row tiles, 14 channels (a partial quad, a partial
               # 32-channel panel) on a 5x5 plane of 25 (a partial 8-row tile)
               (20, 40, 1, 3, 1, 1, 1, 7, 7), (14, 70, 1, 3, 1, 1, 1, 5, 5),
               # 9 pixels, 100 channels: the work split by channel panels
               (8, 100, 1, 3, 1, 1, 1, 3, 3)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("xt, wt", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_qlinearconv_every_qgemm_family(isa, xt, wt, shape):
    c, m, group, k, stride, pad, dil, ih, iw = shape
    x = _q((1, c, ih, iw), xt)
    w = _q((m, c // group, k, k), wt)
    ext = (k - 1) * dil + 1
    h, wd = (ih + 2 * pad - ext) // stride + 1, (iw + 2 * pad - ext) // stride + 1
    consts = {"xs": _scale(), "xz": _q((), xt), "w": w, "ws": _scale(m),
              "wz": np.zeros(m, wt) if wt == np.int8 else _q((m,), wt),
              "ys": np.array(0.3, np.float32), "yz": _q((), xt), "b": RNG.integers(-2000, 2000, m).astype(np.int32)}
    model = _model("QLinearConv", {"x": x}, consts, [1, m, h, wd], NP[xt], group=group, strides=[stride] * 2,
                   pads=[pad] * 4, dilations=[dil] * 2, _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"])
    _check(model, {"x": x})


@pytest.mark.parametrize("isa", [None, "avx512vnni", "sse"], indirect=True)
@pytest.mark.parametrize("case", ["same_upper_s2", "same_lower_s2", "pads_s2_dil2", "conv1d_s2", "dw1d"])
def test_qlinearconv_auto_pad_and_1d(isa, case):
    # asymmetric padding (the end pad one more than the begin pad, or the reverse),
    # stride 2 with dilation 2, and 1-D convolutions (one output row)
    shape, c, m, group, k, attrs = {
        "same_upper_s2": ((1, 12, 14, 11), 12, 20, 1, 3, dict(auto_pad="SAME_UPPER", strides=[2, 2])),
        "same_lower_s2": ((1, 8, 15, 16), 8, 8, 8, 3, dict(auto_pad="SAME_LOWER", strides=[2, 2])),
        "pads_s2_dil2": ((1, 8, 15, 16), 8, 16, 1, 3, dict(pads=[2, 1, 1, 2], strides=[2, 2], dilations=[2, 2])),
        "conv1d_s2": ((1, 10, 37), 10, 24, 1, 5, dict(strides=[2], pads=[2, 1])),
        "dw1d": ((1, 16, 29), 16, 16, 16, 3, dict(strides=[1], pads=[1, 1])),
    }[case]
    x = _q(shape, np.uint8)
    w = _q((m, c // group) + (k,) * (len(shape) - 2), np.int8)
    consts = {"xs": _scale(), "xz": _q((), np.uint8), "w": w, "ws": _scale(m), "wz": np.zeros(m, np.int8),
              "ys": np.array(0.3, np.float32), "yz": _q((), np.uint8), "b": RNG.integers(-2000, 2000, m).astype(np.int32)}
    probe = _model("QLinearConv", {"x": x}, consts, None, TensorProto.UINT8, group=group,
                   _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], **attrs)
    out = ortref.reference_session(probe).run(None, {"x": x})[0]
    model = _model("QLinearConv", {"x": x}, consts, list(out.shape), TensorProto.UINT8, group=group,
                   _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], **attrs)
    _check(model, {"x": x})


def test_qlinearmatmul_per_column():
    a = _q((2, 5, 24), np.uint8)
    consts = {"as": _scale(), "az": _q((), np.uint8), "b": _q((24, 10), np.int8), "bs": _scale(10),
              "bz": np.zeros(10, np.int8), "ys": np.array(0.3, np.float32), "yz": _q((), np.uint8)}
    model = _model("QLinearMatMul", {"a": a}, consts, [2, 5, 10], TensorProto.UINT8,
                   _order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
    _check(model, {"a": a})


@pytest.mark.parametrize("t, bshape", [(np.uint8, (24, 10)), (np.int8, (2, 24, 10))])
def test_qlinearmatmul_runtime_b(t, bshape):
    # b a graph input: packed per run (per batch when it has batch dims), not at prepare.
    a, b = _q((2, 5, 24), t), _q(bshape, t)
    consts = {"as": _scale(), "az": _q((), t), "bs": _scale(), "bz": _q((), t),
              "ys": np.array(0.3, np.float32), "yz": _q((), t)}
    model = _model("QLinearMatMul", {"a": a, "b": b}, consts, [2, 5, 10], NP[t],
                   _order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
    _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("t", [np.uint8, np.int8])
@pytest.mark.parametrize("k", [24, 200])  # below and above AMX's k of 64
def test_qlinearmatmul_and_qgemm_every_qgemm_family(isa, t, k):
    # tiles and panels full and partial on every family, per-column b, a run-time a;
    # QGemm with transB and a per-column bias: both requantised as tiles leave qgemm
    a = _q((2, 37, k), t)
    consts = {"as": _scale(), "az": _q((), t), "b": _q((k, 70), np.int8), "bs": _scale(70),
              "bz": np.zeros(70, np.int8), "ys": np.array(0.5, np.float32), "yz": _q((), t)}
    model = _model("QLinearMatMul", {"a": a}, consts, [2, 37, 70], NP[t],
                   _order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
    _check(model, {"a": a})
    a2 = _q((37, k), t)
    consts = {"as": _scale(), "az": _q((), t), "b": _q((70, k), np.int8), "bs": _scale(70),
              "bz": np.zeros(70, np.int8), "c": RNG.integers(-3000, 3000, 70).astype(np.int32),
              "ys": np.array(0.5, np.float32), "yz": _q((), t)}
    model = _model("QGemm", {"a": a2}, consts, [37, 70], NP[t], domain="com.microsoft", transB=1,
                   _order=["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"])
    _check(model, {"a": a2})
    # uint8 b with a zero point per column (the zero-point terms per lane, not one for all)
    if t == np.uint8:
        consts = {"as": _scale(), "az": _q((), t), "b": _q((k, 70), np.uint8), "bs": _scale(70),
                  "bz": _q((70,), np.uint8), "ys": np.array(0.5, np.float32), "yz": _q((), t)}
        model = _model("QLinearMatMul", {"a": a}, consts, [2, 37, 70], NP[t],
                       _order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
        _check(model, {"a": a})


@pytest.mark.parametrize("isa", [None, "avx2"], indirect=True)
def test_qlinear_kernels_on_threads(isa):
    """qgemm split across a session's threads (along the output columns of a
    convolution, the rows of a MatMul with constant b; MatMulInteger, ConvInteger
    too), depthwise channels and a QLinearAdd's values split:
    the same bytes as onnxruntime's, from every task's disjoint ranges."""
    cases = []
    for c, m, group, k, stride, pad, hw in [(32, 40, 1, 3, 1, 1, 16), (64, 64, 64, 3, 1, 1, 40), (48, 80, 1, 1, 1, 0, 30)]:
        x = _q((1, c, hw, hw), np.uint8)
        oh = (hw + 2 * pad - k) // stride + 1
        consts = {"xs": _scale(), "xz": _q((), np.uint8), "w": _q((m, c // group, k, k), np.int8), "ws": _scale(m),
                  "wz": np.zeros(m, np.int8), "ys": np.array(0.3, np.float32), "yz": _q((), np.uint8),
                  "b": RNG.integers(-2000, 2000, m).astype(np.int32)}
        cases.append((_model("QLinearConv", {"x": x}, consts, [1, m, oh, oh], TensorProto.UINT8, group=group,
                             strides=[stride] * 2, pads=[pad] * 4,
                             _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]), {"x": x}))
    a = _q((3, 37, 200), np.uint8)
    consts = {"as": _scale(), "az": _q((), np.uint8), "b": _q((200, 70), np.int8), "bs": _scale(70),
              "bz": np.zeros(70, np.int8), "ys": np.array(0.5, np.float32), "yz": _q((), np.uint8)}
    cases.append((_model("QLinearMatMul", {"a": a}, consts, [3, 37, 70], TensorProto.UINT8,
                         _order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"]), {"a": a}))
    a = _q((64, 300), np.uint8)
    cases.append((_model("MatMulInteger", {"a": a}, {"b": _q((300, 96), np.int8), "az": _q((), np.uint8),
                                                     "bz": np.zeros(96, np.int8)}, [64, 96], TensorProto.INT32,
                         _order=["a", "b", "az", "bz"]), {"a": a}))
    for t in (np.uint8, np.int8):  # a residual QLinearAdd cut into 64-byte aligned pieces, the last one short
        a, b = _q((1, 64, 40, 41), t), _q((1, 64, 40, 41), t)
        consts = {"as": _scale(), "az": _q((), t), "bs": _scale(), "bz": _q((), t), "cs": np.array(0.05, np.float32),
                  "cz": _q((), t)}
        cases.append((_model("QLinearAdd", {"a": a, "b": b}, consts, [1, 64, 40, 41], NP[t], domain="com.microsoft",
                             _order=["a", "as", "az", "b", "bs", "bz", "cs", "cz"]), {"a": a, "b": b}))
    x = _q((1, 16, 20, 20), np.uint8)
    cases.append((_model("ConvInteger", {"x": x}, {"w": _q((32, 16, 3, 3), np.uint8), "xz": _q((), np.uint8),
                                                   "wz": _q((), np.uint8)}, [1, 32, 20, 20], TensorProto.INT32,
                         pads=[1, 1, 1, 1], _order=["x", "w", "xz", "wz"]), {"x": x}))
    _same_bytes_on_threads(cases, 3)


def _same_bytes_on_threads(cases, threads):
    """Each (model, feeds) on `threads` threads gives onnxruntime's bytes exactly."""
    for model, feeds in cases:
        ref = ortref.reference_session(model).run(None, feeds)[0]
        got = run_with_minirt(model, feeds, threads=threads)[0]
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("isa", [None, "avx2"], indirect=True)
def test_padded_planes_and_quantize_split(isa, threads):
    """The padded input planes built by several threads side by side (each a run of
    channels, a channel's planes and the gap after them whole cache lines), in a 7x7
    stride-2 stem on 224 x 224 (three channels of four phase planes, one a task) and
    3x3 convolutions of odd channel counts and widths; and a network input's
    QuantizeLinear cut into pieces, per tensor and per channel (a piece then spans
    channels of different scales). The same bytes as onnxruntime's."""
    cases = []
    for c, m, k, stride, pad, h, w in [(3, 64, 7, 2, 3, 224, 224), (37, 24, 3, 1, 1, 61, 53), (64, 32, 3, 2, 1, 56, 56)]:
        x = _q((1, c, h, w), np.uint8)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        consts = {"xs": _scale(), "xz": _q((), np.uint8), "w": _q((m, c, k, k), np.int8), "ws": _scale(m),
                  "wz": np.zeros(m, np.int8), "ys": np.array(0.3, np.float32), "yz": _q((), np.uint8),
                  "b": RNG.integers(-2000, 2000, m).astype(np.int32)}
        cases.append((_model("QLinearConv", {"x": x}, consts, [1, m, oh, ow], TensorProto.UINT8, strides=[stride] * 2,
                             pads=[pad] * 4, _order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]), {"x": x}))
    x = (RNG.standard_normal((1, 3, 224, 224)) * 4).astype(np.float32)
    for t in (np.uint8, np.int8):
        cases.append((_model("QuantizeLinear", {"x": x}, {"s": np.array(0.03, np.float32), "z": _q((), t)},
                             list(x.shape), NP[t], _order=["x", "s", "z"]), {"x": x}))
    cases.append((_model("QuantizeLinear", {"x": x}, {"s": _scale(3) * 4, "z": _q((3,), np.uint8)}, list(x.shape),
                         TensorProto.UINT8, axis=1, _order=["x", "s", "z"]), {"x": x}))
    _same_bytes_on_threads(cases, threads)


def test_qgemm_trans_a_full_bias():
    a = _q((32, 7), np.int8)
    consts = {"as": _scale(), "az": _q((), np.int8), "b": _q((32, 12), np.int8), "bs": _scale(12),
              "bz": np.zeros(12, np.int8), "c": RNG.integers(-300, 300, (7, 12)).astype(np.int32),
              "ys": np.array(0.4, np.float32), "yz": _q((), np.int8)}
    model = _model("QGemm", {"a": a}, consts, [7, 12], TensorProto.INT8, domain="com.microsoft", transA=1,
                   alpha=0.5, _order=["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"])
    _check(model, {"a": a})


@pytest.mark.parametrize("out", ["uint8", "float32"])
def test_qgemm(out):
    a = _q((3, 32), np.uint8)
    consts = {"as": _scale(), "az": _q((), np.uint8), "b": _q((10, 32), np.int8), "bs": _scale(),
              "bz": np.zeros((), np.int8), "c": RNG.integers(-300, 300, 10).astype(np.int32),
              "ys": np.array(0.4, np.float32), "yz": _q((), np.uint8)}
    order = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if out == "uint8" else [])
    if out == "float32":
        del consts["ys"], consts["yz"]
    model = _model("QGemm", {"a": a}, consts, [3, 10], TensorProto.UINT8 if out == "uint8" else TensorProto.FLOAT,
                   domain="com.microsoft", transB=1, _order=order)
    _check(model, {"a": a})


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("t", [np.uint8, np.int8])
@pytest.mark.parametrize("bshape", [(2, 8, 5, 5), (1, 8, 1, 1)])
def test_qlinear_binary(op, t, bshape):
    a, b = _q((2, 8, 5, 5), t), _q(bshape, t)
    consts = {"as": _scale(), "az": _q((), t), "bs": _scale(), "bz": _q((), t), "cs": np.array(0.05, np.float32),
              "cz": _q((), t)}
    model = _model(op, {"a": a, "b": b}, consts, [2, 8, 5, 5], NP[t], domain="com.microsoft",
                   _order=["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("t", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (1, 16, 33, 35)])
def test_qlinear_add_every_family(isa, t, shape):
    """QLinearAdd's vector loops (16, 8 and 4 lanes by family) and their tails: 105
    and 18,480 values; zero points at the type's ends, scales that saturate both ways,
    and values that land on .5 steps (sa = sb = 2 sc)."""
    a, b = _q(shape, t), _q(shape, t)
    info = np.iinfo(t)
    for az, bz, sa, sb, cz in [(info.min, info.max, 0.03, 0.02, 0), (info.max, info.min, 0.2, 0.3, info.max // 3),
                               (3, -2 if t == np.int8 else 7, 0.1, 0.1, 5)]:
        consts = {"as": np.array(sa, np.float32), "az": np.array(az, t), "bs": np.array(sb, np.float32),
                  "bz": np.array(bz, t), "cs": np.array(0.05, np.float32), "cz": np.array(cz, t)}
        model = _model("QLinearAdd", {"a": a, "b": b}, consts, list(shape), NP[t], domain="com.microsoft",
                       _order=["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
        _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("t", [np.uint8, np.int8])
def test_qlinear_global_average_pool(t):
    x = _q((2, 6, 7, 7), t)
    consts = {"xs": _scale(), "xz": _q((), t), "ys": _scale(), "yz": _q((), t)}
    model = _model("QLinearGlobalAveragePool", {"x": x}, consts, [2, 6, 1, 1], NP[t], domain="com.microsoft",
                   _order=["x", "xs", "xz", "ys", "yz"])
    _check(model, {"x": x})


@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("t", [np.uint8, np.int8])
def test_qlinear_lookup(op, attrs, t):
    info = np.iinfo(t)
    x = np.arange(info.min, info.max + 1).astype(t).reshape(1, 256)
    consts = {"xs": np.array(0.05, np.float32), "xz": _q((), t), "ys": np.array(0.01, np.float32), "yz": _q((), t)}
    model = _model(op, {"x": x}, consts, [1, 256], NP[t], domain="com.microsoft", _order=["x", "xs", "xz", "ys", "yz"],
                   **attrs)
    _check(model, {"x": x})

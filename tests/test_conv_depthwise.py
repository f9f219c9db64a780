"""Depthwise convolution against onnxruntime: the channel-blocked path (constant
weights, VL channels a vector: 16 on AVX-512, 8 AVX2, 4 NEON) and the plane path
(weights fed at run time, which the blocked path cannot pack at prepare; every
convolution under the SSE cap, and AVX2's wide 3x3 layers), on channel counts
around every VL (1, VL-1, VL+3, 3 VL), 3x3 / 5x5 /
7x7 kernels, strides 1 to 3, asymmetric pads, dilation 2, 1-D, batch 2, the
fused clamps and activations and the residual, under every ISA cap and at 1 and
2 threads. aarch64 and armv7 run the same cases under qemu (test_arm_kernels.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import optimised

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

ISAS = [None, "avx2", "sse"]


def dw_model(x_shape, k, attrs, tail="none", w_input=False, bias=True, seed=0):
    """Depthwise Conv (group = channels) on x_shape with kernel k (int or tuple)
    followed by `tail`; the weights are an initializer, or a graph input when
    w_input (the plane path). Returns the model, its runtime feeds and the op
    the optimised graph should run."""
    rng = np.random.default_rng(seed)
    c = x_shape[1]
    ks = (k,) * (len(x_shape) - 2) if isinstance(k, int) else tuple(k)
    w = (rng.standard_normal((c, 1, *ks)) * (np.prod(ks) ** -0.5)).astype(np.float32)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    inits = {}
    (feeds if w_input else inits)["w"] = w
    ins = ["x", "w"]
    if bias:
        inits["b"] = (rng.standard_normal(c) * 0.3).astype(np.float32)
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["c"], group=c, **attrs)]
    fused = "Conv"
    if tail == "relu6":
        inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        fused = "FusedConv"
    elif tail == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        fused = "FusedConvAct"
    elif tail == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
        fused = "FusedConvAct"
    elif tail == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", ["c"], ["y"]))
        fused = "FusedConvAct"
    elif tail in ("add", "add_relu6"):
        out = "y" if tail == "add" else "s"
        nodes.append(helper.make_node("Add", ["c", "r"], [out]))
        if tail == "add_relu6":
            inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
            nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["y"]))
        fused = "FusedConv"
    else:
        nodes[0].output[0] = "y"
    if tail in ("add", "add_relu6"):
        probe = _model(nodes[:1], feeds, inits, ["c"])
        feeds["r"] = rng.standard_normal(
            [d.dim_value for d in probe.graph.output[0].type.tensor_type.shape.dim]).astype(np.float32)
    return _model(nodes, feeds, inits, ["y"]), feeds, fused


def _model(nodes, feeds, inits, outputs):
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    m = helper.make_model(helper.make_graph(nodes, "dw", inputs, [], init),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(m, strict_mode=True).graph.value_info}
    m = helper.make_model(helper.make_graph(nodes, "dw", inputs, [known[o] for o in outputs], init),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run_minirt(model, feeds, threads=1):
    return testing.run_with_minirt(model, feeds, constant_inputs=[], threads=threads)[0]


def check(model, feeds, fused, threads=1):
    assert [n.op_type for n in optimised(model, feeds).nodes] == [fused]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = run_minirt(model, feeds, threads)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return got


# Channels around every VL: 1, VL - 1 (3, 7, 15), VL + 3 (7, 11, 19), 3 VL (12, 24, 48).
CHANNELS = [1, 3, 7, 11, 15, 19, 48]

# name -> (H, W, kernel, attributes)
SHAPES = {
    "3x3_s1": (13, 19, 3, {"pads": [1, 1, 1, 1]}),
    "3x3_s2": (14, 15, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "5x5_s1": (7, 7, 5, {"pads": [2, 2, 2, 2]}),
    "5x5_s2": (14, 14, 5, {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    "7x7_s3": (17, 20, 7, {"pads": [3, 2, 1, 3], "strides": [3, 3]}),
    "3x3_asym": (9, 12, 3, {"pads": [0, 2, 1, 0]}),
    "3x3_dil2": (12, 11, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "5x5_s2_dil2_nopad": (20, 23, 5, {"strides": [2, 1], "dilations": [2, 2]}),
    "3x5": (10, 33, (3, 5), {"pads": [1, 2, 1, 2]}),
    "same_upper_s2": (15, 16, 3, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    # Rows ending in 2 outputs after the 8- and 4-wide groups (10 = 8 + 2, 14 = 8 + 4 + 2).
    "3x3_ow10": (6, 10, 3, {"pads": [1, 1, 1, 1]}),
    "5x5_ow14": (5, 14, 5, {"pads": [2, 2, 2, 2]}),
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("c", CHANNELS)
def test_depthwise_blocked_and_plane(isa, shape, c):
    h, w, k, attrs = SHAPES[shape]
    for w_input in (False, True):
        model, feeds, fused = dw_model((1, c, h, w), k, attrs, w_input=w_input, seed=c)
        check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("tail", ["relu6", "silu", "hardswish", "sigmoid", "add", "add_relu6"])
@pytest.mark.parametrize("c", [5, 19, 48])
def test_depthwise_fused(isa, tail, c):
    for shape, k, attrs in (((1, c, 7, 7), 5, {"pads": [2, 2, 2, 2]}),
                            ((1, c, 15, 14), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]})):
        for w_input in (False, True):
            model, feeds, fused = dw_model(shape, k, attrs, tail, w_input=w_input, seed=c)
            check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_depthwise_1d_batch_nobias(isa):
    model, feeds, fused = dw_model((2, 19, 37), 5, {"pads": [2, 1], "strides": [2]}, "silu")
    check(model, feeds, fused)
    # Rows too wide for the blocked path's tile (5000 x VL floats): the plane path.
    model, feeds, fused = dw_model((1, 5, 5000), 3, {"pads": [1, 1]}, "relu6")
    check(model, feeds, fused)
    model, feeds, fused = dw_model((2, 21, 9, 10), 3, {"pads": [1, 1, 1, 1]}, "add_relu6", bias=False)
    check(model, feeds, fused)
    model, feeds, fused = dw_model((1, 17, 1, 40), (1, 7), {"pads": [0, 3, 0, 3]}, "relu6")
    check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", ["big_plane", "many_channels", "residual_s2", "uneven_runs"])
def test_depthwise_threads(isa, case):
    """2 threads split channel blocks and row strips: the same bytes as 1 thread.
    uneven_runs: 36 blocks of 16 (72 of 8) in runs that whole items cannot make
    equal (8 runs of 4 or 5 blocks), also on 3 threads."""
    counts = (2,)
    if case == "uneven_runs":
        model, feeds, fused = dw_model((1, 570, 14, 14), 3, {"pads": [1, 1, 1, 1]}, "relu6")
        counts = (2, 3)
    elif case == "big_plane":  # few channels on a big plane: the tasks are row strips
        model, feeds, fused = dw_model((1, 5, 96, 90), 3, {"pads": [1, 1, 1, 1]}, "silu")
    elif case == "many_channels":
        model, feeds, fused = dw_model((2, 67, 14, 14), 5, {"pads": [2, 2, 2, 2]}, "hardswish")
    else:
        model, feeds, fused = dw_model((1, 35, 57, 58), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "add_relu6")
    one = check(model, feeds, fused, threads=1)
    for threads in counts:
        assert np.array_equal(one, check(model, feeds, fused, threads=threads))


# The blocked path gathers its tile a chunk of output rows at a time, right
# before the chunk's taps, on wide planes: stride 2 from 14 outputs wide (one
# row a chunk from 56), stride 1 from 28 to 111 wide; edges, halos and the
# strips of 2 threads then fall inside and between chunk gathers.
INTERLEAVED = {
    "3x3_s2_ow58": ((113, 115), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "relu6"),
    "5x5_s2_ow16": ((30, 31), 5, {"pads": [2, 2, 2, 2], "strides": [2, 2]}, "silu"),
    "3x3_s2_asym": ((33, 40), 3, {"pads": [0, 1, 2, 0], "strides": [2, 2]}, "add_relu6"),
    "3x3_s1_ow60": ((9, 60), 3, {"pads": [1, 1, 1, 1]}, "relu6"),
    "5x5_s1_ow64": ((11, 64), 5, {"pads": [2, 2, 2, 2]}, "add"),
    "3x3_s1_dil2_ow70": ((8, 70), 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "hardswish"),
    "3x3_s1_ow30": ((13, 30), 3, {"pads": [1, 1, 1, 1]}, "silu"),
    "5x5_s1_ow28": ((10, 28), 5, {"pads": [2, 2, 2, 2]}, "add_relu6"),
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", sorted(INTERLEAVED))
@pytest.mark.parametrize("c", [7, 19])
def test_depthwise_interleaved_gather(isa, shape, c):
    hw, k, attrs, tail = INTERLEAVED[shape]
    model, feeds, fused = dw_model((1, c, *hw), k, attrs, tail, seed=c)
    one = check(model, feeds, fused, threads=1)
    two = check(model, feeds, fused, threads=2)
    assert np.array_equal(one, two)


# AVX-512 runs 3x3 layers 56 or more outputs wide (stride 2: 28) on the row
# path (vectors along a plane's rows, each input row read once into a
# zero-padded row buffer, split into even and odd columns at stride 2, two
# output rows a pass): rows ending in a ragged vector, odd output heights (a
# last pass of one row), pads of 0, 1 and 2 on either side, odd input widths.
# The buffer fill reads whole vectors (stride 2: pairs) with plain loads and
# only a ragged end with masked ones, whose zeros clear the buffer past the
# row: input rows of whole vectors with a pad (64 wide; 64 and 96 at stride
# 2), ends of 1, 8, 15 floats (57, 56, 63 wide) and, at stride 2, of exactly
# 16 and of 17 (80, 113) floats past the last pair.
ROWS = {
    "s1_ow56": ((5, 56), {"pads": [1, 1, 1, 1]}),
    "s1_asym_ow59": ((7, 60), {"pads": [0, 1, 2, 0]}),
    "s1_nopad_ow62": ((6, 64), {}),
    "s1_ow113": ((4, 113), {"pads": [1, 1, 1, 1]}),
    "s1_w64_ow64": ((5, 64), {"pads": [1, 1, 1, 1]}),
    "s1_w57_ow57": ((6, 57), {"pads": [1, 1, 1, 1]}),
    "s1_w63_pad2_ow65": ((3, 63), {"pads": [2, 2, 2, 2]}),
    "s2_w64_ow32": ((8, 64), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_w96_asym_ow48": ((9, 96), {"pads": [0, 0, 1, 1], "strides": [2, 2]}),
    "s2_w80_ow40": ((6, 80), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_ow28": ((7, 56), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_ow31": ((9, 61), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_ow56": ((9, 112), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_oddw_ow57": ((8, 113), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "s2_nopad_ow57": ((7, 115), {"strides": [2, 2]}),
    "s2_pad2_ow56": ((6, 110), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    "s2_same_upper_ow60": ((10, 120), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "s2_asym_ow64": ((11, 128), {"pads": [2, 0, 0, 1], "strides": [2, 2]}),
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", sorted(ROWS))
@pytest.mark.parametrize("c", [1, 5, 17])
def test_depthwise_rows(isa, shape, c):
    hw, attrs = ROWS[shape]
    model, feeds, fused = dw_model((1, c, *hw), 3, attrs, "relu6", seed=c)
    check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("tail", ["none", "silu", "hardswish", "sigmoid", "add", "add_relu6"])
def test_depthwise_rows_fused_batch(isa, tail):
    for hw, attrs in (((7, 58), {"pads": [1, 1, 1, 1]}), ((9, 117), {"pads": [1, 1, 1, 1], "strides": [2, 2]})):
        model, feeds, fused = dw_model((2, 6, *hw), 3, attrs, tail, bias=tail != "add")
        check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", ["s1", "s2", "s1_narrow", "s2_narrow"])
def test_depthwise_rows_threads(isa, case):
    """Runs of planes on 1, 2 and 4 threads: the same bytes each time. On
    threads the row path takes inputs from 112 wide only: the narrow cases
    run it at 1 thread and the blocked path at 2 and 4, which must agree."""
    if case == "s1":
        model, feeds, fused = dw_model((1, 13, 21, 120), 3, {"pads": [1, 1, 1, 1]}, "silu")
    elif case == "s2":
        model, feeds, fused = dw_model((2, 7, 23, 120), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "add_relu6")
    elif case == "s1_narrow":
        model, feeds, fused = dw_model((1, 13, 21, 64), 3, {"pads": [1, 1, 1, 1]}, "silu")
    else:
        model, feeds, fused = dw_model((1, 19, 15, 60), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "hardswish")
    one = check(model, feeds, fused, threads=1)
    for threads in (2, 4):
        assert np.array_equal(one, check(model, feeds, fused, threads=threads))


# AVX-512 runs 3x3, stride 1, pads 1 layers 16 or fewer outputs wide on the
# narrow path: a vector holds 16 // W whole rows and every tap is a masked load
# from the plane. Planes of one vector and of several; heights that leave a
# last vector of fewer rows (7 rows of width 7 at 2 a vector, 11 of width 3 at
# 5), exact multiples (16 of width 4), one row, width 1 and 16.
NARROW = {
    "w14_h14": (14, 14), "w7_h7": (7, 7), "w16_h5": (5, 16), "w8_h9": (9, 8), "w5_h6": (6, 5),
    "w1_h3": (3, 1), "w2_h1": (1, 2), "w3_h11": (11, 3), "w9_h2": (2, 9), "w13_h4": (4, 13),
    "w4_h16": (16, 4), "w6_h13": (13, 6), "w15_h3": (3, 15),
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", sorted(NARROW))
def test_depthwise_narrow(isa, shape):
    model, feeds, fused = dw_model((1, 19, *NARROW[shape]), 3, {"pads": [1, 1, 1, 1]}, "relu6", seed=len(shape))
    check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("tail", ["none", "silu", "add", "add_relu6"])
def test_depthwise_narrow_fused_threads(isa, tail):
    """Activations after the clamp and the residual, batch 2, on 1, 2 and 4
    threads: the same bytes each time."""
    model, feeds, fused = dw_model((2, 37, 7, 7), 3, {"pads": [1, 1, 1, 1]}, tail, bias=tail != "add")
    one = check(model, feeds, fused, threads=1)
    for threads in (2, 4):
        assert np.array_equal(one, check(model, feeds, fused, threads=threads))


# Stride 2 on the narrow path (outputs 6 to 16 wide): a 28-wide input row as
# two vectors (odd widths 27, 31 and the full 32), two 14-, 13-, 16- or 12-wide
# rows a vector, heights ending in a part vector (7 output rows at 2 a vector),
# no padding at the end (pads 1, 1, 0, 0).
NARROW_S2 = {
    "w28": ((28, 28), [1, 1, 1, 1]), "w14": ((14, 14), [1, 1, 1, 1]), "w27_h9": ((9, 27), [1, 1, 1, 1]),
    "w31_h5": ((5, 31), [1, 1, 1, 1]), "w32_h4": ((4, 32), [1, 1, 1, 1]), "w13_h13": ((13, 13), [1, 1, 1, 1]),
    "w16_h16": ((16, 16), [1, 1, 1, 1]), "w12_h3": ((3, 12), [1, 1, 1, 1]), "w28_end0": ((28, 28), [1, 1, 0, 0]),
    "w14_end0_h15": ((15, 14), [1, 1, 0, 0]),
}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", sorted(NARROW_S2))
def test_depthwise_narrow_s2(isa, shape):
    hw, pads = NARROW_S2[shape]
    model, feeds, fused = dw_model((1, 19, *hw), 3, {"pads": pads, "strides": [2, 2]}, "relu6", seed=len(shape))
    check(model, feeds, fused)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("tail", ["silu", "add_relu6"])
def test_depthwise_narrow_s2_fused_threads(isa, tail):
    model, feeds, fused = dw_model((2, 37, 14, 14), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, tail)
    one = check(model, feeds, fused, threads=1)
    for threads in (2, 4):
        assert np.array_equal(one, check(model, feeds, fused, threads=threads))

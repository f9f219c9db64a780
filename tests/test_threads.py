"""The thread pool: outputs at 1, 2 and 4 threads are the same bytes and match
onnxruntime (MobileNetV2, a GEMM model, a BERT-like encoder block, FusedConv
residual / activation epilogues, int8 convolutions and a residual QLinearAdd, ResNet's
56x56 pointwise layers, MobileNetV2's 14x14 block, broadcast elementwise ops, pools); the option
in Python (in-process, like onnxruntime's SessionOptions) and Java (host JVM
through the JNI glue); a --no-threads build has no pthread symbol and still
runs; and ThreadSanitizer (Debian's clang) finds no data race running the
runtime and the kernels with 2 and 4 threads, nor running the pool on its own
(each task once, runs on their owners, stealing from a busy worker)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from conftest import build
from minibuild import build as build_mod, codegen, ortref, pipeline, resources, toolchain

RNG = np.random.default_rng(13)
THREADS = (1, 2, 4)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inits, feeds, outputs, opset=17):
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    probe = helper.make_model(helper.make_graph(nodes, "probe", inputs, [], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    probe.ir_version = 8
    known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(probe, strict_mode=True).graph.value_info}
    m = helper.make_model(helper.make_graph(nodes, "threads", inputs, [known[o] for o in outputs], inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def gemm_model():
    """Gemm (constant B, transposed, bias row) past one block of every size, then a
    MatMul of two activations (nothing packed at prepare)."""
    m, k, n = 97, 300, 260
    inits = [numpy_helper.from_array(randn(n, k, scale=k ** -0.5), "w"), numpy_helper.from_array(randn(n), "b")]
    nodes = [helper.make_node("Gemm", ["a", "w", "b"], ["g"], transB=1, alpha=0.5),
             helper.make_node("Transpose", ["g"], ["gt"]),
             helper.make_node("MatMul", ["g", "gt"], ["y"])]
    feeds = {"a": randn(m, k)}
    return _model(nodes, inits, feeds, ["g", "y"]), feeds


def small_image_convs():
    """Convolutions on 14 x 14 and 7 x 7 images (N = 196 and 49 columns: a few
    GEMM panels, so the work is split along the output channels instead), through
    im2col and as a pointwise GEMM; and Relu, Sigmoid and Add on 150,003 floats."""
    inits = [numpy_helper.from_array(randn(48, 32, 3, 3, scale=0.1), "w1"), numpy_helper.from_array(randn(48), "b1"),
             numpy_helper.from_array(randn(64, 48, 3, 3, scale=0.1), "w2"), numpy_helper.from_array(randn(64), "b2"),
             numpy_helper.from_array(randn(40, 64, 1, 1, scale=0.1), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["c2", "w3"], ["y"]),
             # elementwise ops over arrays big enough to be cut between threads
             helper.make_node("Relu", ["v"], ["rv"]),
             helper.make_node("Sigmoid", ["rv"], ["sv"]),
             helper.make_node("Add", ["sv", "v"], ["z"])]
    feeds = {"x": randn(1, 32, 14, 14), "v": randn(3, 50001)}
    return _model(nodes, inits, feeds, ["y", "z"]), feeds


def conv_epilogues():
    """FusedConv / FusedConvAct epilogues on work big enough to split: a residual
    Add + Relu after a 3x3 and a 1x1 conv (the GEMM split along its columns), a
    depthwise conv + HardSwish (split by planes), a SiLU and a Sigmoid conv, and a
    squeeze-excitation gate on the SiLU's output whose Mul joins the 1x1 conv after
    it (ScaledConv)."""
    inits = [numpy_helper.from_array(randn(32, 32, 3, 3, scale=0.06), "w1"), numpy_helper.from_array(randn(32), "b1"),
             numpy_helper.from_array(randn(32, 32, 1, 1, scale=0.2), "w2"),
             numpy_helper.from_array(randn(32, 1, 3, 3, scale=0.3), "w3"), numpy_helper.from_array(randn(32), "b3"),
             numpy_helper.from_array(randn(48, 32, 1, 1, scale=0.2), "w4"),
             numpy_helper.from_array(randn(16, 48, 3, 3, scale=0.05), "w5"),
             numpy_helper.from_array(randn(8, 48, 1, 1, scale=0.3), "wg1"),
             numpy_helper.from_array(randn(48, 8, 1, 1, scale=0.5), "wg2"),
             numpy_helper.from_array(randn(24, 48, 1, 1, scale=0.2), "w6")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "x"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["r1", "c2"], ["s2"]),
             helper.make_node("Relu", ["s2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], group=32, pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c3"], ["h3"]),
             helper.make_node("Conv", ["h3", "w4"], ["c4"]),
             helper.make_node("Sigmoid", ["c4"], ["g4"]),
             helper.make_node("Mul", ["c4", "g4"], ["y4"]),
             helper.make_node("Conv", ["y4", "w5"], ["c5"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Sigmoid", ["c5"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y4"], ["p6"]),
             helper.make_node("Conv", ["p6", "wg1"], ["q6"]),
             helper.make_node("Relu", ["q6"], ["q6r"]),
             helper.make_node("Conv", ["q6r", "wg2"], ["q6g"]),
             helper.make_node("Sigmoid", ["q6g"], ["g6"]),
             helper.make_node("Mul", ["y4", "g6"], ["s6"]),
             helper.make_node("Conv", ["s6", "w6"], ["z"])]
    feeds = {"x": randn(1, 32, 40, 43)}
    return _model(nodes, inits, feeds, ["y", "r2", "z"]), feeds


def cnn_convs():
    """Convolutions of a CNN's middle and late stages, where the weights outweigh
    the image (more output channels than output pixels: on im2col the threads
    pack the panel once, shared, and split the output channels; on x86-64 the
    3x3s of 96+ output pixels take the dense path, conv_dense.h, whose threads
    each take a run of weight panels): 3x3 on 14x14,
    a strided 3x3 down to 7x7, a 1x1 with a residual Add + Relu, 200 channels on
    13x13 (edge panels both ways); split as before, a 3x3 on 28x28 with a
    residual and a depthwise 3x3 on 14x14; and strided 3x3s on 56x56 inputs, plain
    and in 2 groups, whose zero-padded copy is big enough to be made on threads."""
    inits = [numpy_helper.from_array(randn(256, 64, 3, 3, scale=0.04), "w1"), numpy_helper.from_array(randn(256), "b1"),
             numpy_helper.from_array(randn(256, 256, 1, 1, scale=0.06), "w2"),
             numpy_helper.from_array(randn(256, 256, 3, 3, scale=0.02), "w3"), numpy_helper.from_array(randn(256), "b3"),
             numpy_helper.from_array(randn(256, 1, 3, 3, scale=0.3), "wd"),
             numpy_helper.from_array(randn(64, 64, 3, 3, scale=0.04), "w5"), numpy_helper.from_array(randn(64), "b5"),
             numpy_helper.from_array(randn(200, 64, 3, 3, scale=0.04), "w6"),
             numpy_helper.from_array(randn(64, 64, 3, 3, scale=0.04), "w7"),
             numpy_helper.from_array(randn(64, 32, 3, 3, scale=0.06), "w8")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["s2"]),
             helper.make_node("Relu", ["s2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y7"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["r2", "wd"], ["yd"], group=256, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x28", "w5", "b5"], ["c5"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c5", "x28"], ["s5"]),
             helper.make_node("Relu", ["s5"], ["y28"]),
             helper.make_node("Conv", ["x13", "w6"], ["c6"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c6"], ["y13"]),
             helper.make_node("Conv", ["x56", "w7"], ["y56"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x56", "w8"], ["yg"], group=2, pads=[1, 1, 1, 1], strides=[2, 2])]
    feeds = {"x": randn(1, 64, 14, 14), "x28": randn(1, 64, 28, 28), "x13": randn(1, 64, 13, 13),
             "x56": randn(1, 64, 56, 56)}
    return _model(nodes, inits, feeds, ["y7", "yd", "y28", "y13", "y56", "yg"]), feeds


def int8_cnn():
    """QOperator int8 layers big enough to split: a 3x3 QLinearConv (the qgemm split; on
    AVX512-VNNI hosts the channel-quad one, by pixel tiles), a depthwise 3x3 (channels
    split, each thread padding its own), a residual QLinearAdd of 75,264 values (split
    in 64-byte pieces), a strided 1x1 with per-channel weights, a strided 3x3 to 256
    channels of 7 x 7 (split by channels); uint8 activations and int8 weights, as
    quantize_static writes them. Exact: each int8 value is computed the same way on any split."""
    rng = np.random.default_rng(21)
    c, m, hw = 32, 48, 28
    q8 = lambda shape: rng.integers(-127, 128, size=shape).astype(np.int8)  # noqa: E731
    f = lambda v: np.asarray(v, np.float32)  # noqa: E731
    u = lambda v: np.asarray(v, np.uint8)  # noqa: E731
    consts = {"xs": f(0.02), "xz": u(128), "w1": q8((m, c, 3, 3)), "w1s": f(rng.uniform(0.002, 0.006, m)),
              "w1z": np.zeros(m, np.int8), "b1": rng.integers(-3000, 3000, m).astype(np.int32),
              "ys": f(0.05), "yz": u(120), "wd": q8((m, 1, 3, 3)), "wds": f(rng.uniform(0.01, 0.03, m)),
              "wdz": np.zeros(m, np.int8), "bd": rng.integers(-500, 500, m).astype(np.int32),
              "ds": f(0.06), "dz": u(110), "rs": f(0.07), "rz": u(125), "w3": q8((64, m, 1, 1)),
              "w3s": f(rng.uniform(0.003, 0.008, 64)), "w3z": np.zeros(64, np.int8), "os": f(0.08), "oz": u(128),
              "w4": q8((256, 64, 3, 3)), "w4s": f(rng.uniform(0.001, 0.003, 256)), "w4z": np.zeros(256, np.int8),
              "o4s": f(0.1), "o4z": u(128)}
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    ms = "com.microsoft"
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w1", "w1s", "w1z", "ys", "yz", "b1"], ["c1"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["c1", "ys", "yz", "wd", "wds", "wdz", "ds", "dz", "bd"], ["c2"],
                              group=m, pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAdd", ["c1", "ys", "yz", "c2", "ds", "dz", "rs", "rz"], ["r"], domain=ms),
             helper.make_node("QLinearConv", ["r", "rs", "rz", "w3", "w3s", "w3z", "os", "oz"], ["c3"],
                              strides=[2, 2]),
             # 7 x 7 out, 256 channels: too few pixel tiles to share, the threads split the channels
             helper.make_node("QLinearConv", ["c3", "os", "oz", "w4", "w4s", "w4z", "o4s", "o4z"], ["c4"],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["c3", "os", "oz"], ["y"]),
             helper.make_node("DequantizeLinear", ["c4", "o4s", "o4z"], ["y4"]),
             helper.make_node("DequantizeLinear", ["r", "rs", "rz"], ["yr"])]
    feeds = {"x": randn(1, c, hw, hw)}
    g = helper.make_graph(nodes, "threads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, hw // 2, hw // 2]),
                           helper.make_tensor_value_info("yr", TensorProto.FLOAT, [1, m, hw, hw]),
                           helper.make_tensor_value_info("y4", TensorProto.FLOAT, [1, 256, hw // 4, hw // 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, feeds


def bert_like():
    """One encoder layer big enough to split: 2 x 64 tokens, hidden 96, 4 heads, FFN 384."""
    b, s, h, heads, ffn = 2, 64, 96, 4, 384
    dh = h // heads
    inits, nodes, n = [], [], [0]

    def const(v):
        n[0] += 1
        inits.append(numpy_helper.from_array(np.asarray(v), f"c{n[0]}"))
        return f"c{n[0]}"

    def op(t, ins, **attrs):
        n[0] += 1
        out = f"{t.lower()}{n[0]}"
        nodes.append(helper.make_node(t, ins, [out], **attrs))
        return out

    def dense(x, i, o):
        return op("Add", [op("MatMul", [x, const(randn(i, o, scale=i ** -0.5))]), const(randn(o, scale=0.1))])

    shape = const(np.array([b, s, heads, dh], np.int64))
    q = op("Transpose", [op("Reshape", [dense("x", h, h), shape])], perm=[0, 2, 1, 3])
    kt = op("Transpose", [op("Reshape", [dense("x", h, h), shape])], perm=[0, 2, 3, 1])
    v = op("Transpose", [op("Reshape", [dense("x", h, h), shape])], perm=[0, 2, 1, 3])
    scores = op("Div", [op("MatMul", [q, kt]), const(np.float32(np.sqrt(dh)))])
    probs = op("Softmax", [scores], axis=-1)
    ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, v])], perm=[0, 2, 1, 3]),
                         const(np.array([b, s, h], np.int64))])
    ln1 = op("LayerNormalization", [op("Add", ["x", dense(ctx, h, h)]), const(randn(h, scale=0.1) + 1),
                                    const(randn(h, scale=0.1))], axis=-1, epsilon=1e-5)
    ffn_out = dense(op("Relu", [dense(ln1, h, ffn)]), ffn, h)
    out = op("LayerNormalization", [op("Add", [ln1, ffn_out]), const(randn(h) + 1), const(randn(h))],
             axis=-1, epsilon=1e-5)
    col = op("Softmax", [scores], axis=1)
    return _model(nodes, inits, {"x": randn(b, s, h)}, [out, col]), {"x": randn(b, s, h)}


def large_planes():
    """ResNet-50's first stage at its size (56x56 planes, N = 3136 = 65 * 48 + 16):
    a 1x1 64 -> 256 with a residual Add + Relu (the residual added in the GEMM's
    register tiles, the tiles walking rows of C, B blocks of 1536 columns at k = 64)
    and a 1x1 256 -> 64 + Relu (B blocks of 384 columns, packed row by row), the
    columns split between the threads."""
    inits = [numpy_helper.from_array(randn(256, 64, 1, 1, scale=0.12), "w1"), numpy_helper.from_array(randn(256), "b1"),
             numpy_helper.from_array(randn(64, 256, 1, 1, scale=0.06), "w2"), numpy_helper.from_array(randn(64), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Add", ["c1", "r"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["y1"]),
             helper.make_node("Conv", ["y1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["y"])]
    feeds = {"x": randn(1, 64, 56, 56), "r": randn(1, 256, 56, 56)}
    return _model(nodes, inits, feeds, ["y", "y1"]), feeds


def small_projections():
    """MobileNetV2's 14 x 14 block (N = 196: five 48-column panels, few a thread,
    so the pointwise GEMMs split along the output channels): 1x1 96 -> 576 +
    Clip, depthwise 3x3, 1x1 576 -> 96 with a residual Add; a 1x1 576 -> 60 (rows
    of C not whole tiles) and a 1x1 96 -> 64 on 7 x 7 planes (N = 49)."""
    inits = [numpy_helper.from_array(randn(576, 96, 1, 1, scale=0.1), "we"), numpy_helper.from_array(randn(576), "be"),
             numpy_helper.from_array(randn(576, 1, 3, 3, scale=0.3), "wd"), numpy_helper.from_array(randn(576), "bd"),
             numpy_helper.from_array(randn(96, 576, 1, 1, scale=0.04), "wp"), numpy_helper.from_array(randn(96), "bp"),
             numpy_helper.from_array(randn(60, 576, 1, 1, scale=0.04), "wr"),
             numpy_helper.from_array(randn(64, 96, 1, 1, scale=0.1), "w7"),
             numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
             helper.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=576, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["da"]),
             helper.make_node("Conv", ["da", "wp", "bp"], ["p"]),
             helper.make_node("Add", ["p", "x"], ["y"]),
             helper.make_node("Conv", ["da", "wr"], ["y60"]),
             helper.make_node("Conv", ["x7", "w7"], ["y7"])]
    feeds = {"x": randn(1, 96, 14, 14), "x7": randn(1, 96, 7, 7)}
    return _model(nodes, inits, feeds, ["y", "y60", "y7"]), feeds


def broadcasts():
    """Broadcast elementwise ops big enough to split by rows of their plan: a
    squeeze-excitation's channel scale (GlobalAveragePool -> Sigmoid -> Mul
    [1, 144, 56, 56] * [1, 144, 1, 1], both operand orders), a Sub whose plan
    keeps four dims and 786 rows (ragged runs), a bias row [300, 256] + [256] and
    a variadic Sum widening in place."""
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y1"]),
             helper.make_node("Mul", ["s", "x"], ["y2"]),
             helper.make_node("Sub", ["v", "w"], ["y3"]),
             helper.make_node("Add", ["h", "bias"], ["y4"]),
             helper.make_node("Sum", ["s", "x", "t"], ["y5"])]
    inits = [numpy_helper.from_array(randn(3, 1, 129), "w"), numpy_helper.from_array(randn(256), "bias"),
             numpy_helper.from_array(randn(56), "t")]
    feeds = {"x": randn(1, 144, 56, 56), "v": randn(2, 3, 131, 129), "h": randn(300, 256)}
    return _model(nodes, inits, feeds, ["y1", "y2", "y3", "y4", "y5"]), feeds


def pools():
    """Pools big enough to split (runs of planes): ResNet's 3x3 stride-2 MaxPool
    on 64 x 112 x 112, a padded ceil_mode AveragePool over 32 planes (ragged
    runs), a 3-D MaxPool, a stride-1 one (the flat form), and GlobalAveragePools
    of squeeze-excitation size on 7 x 7 and 14 x 14 planes."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["y2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("MaxPool", ["v"], ["y3"], kernel_shape=[2, 3, 3], strides=[2, 2, 2]),
             helper.make_node("MaxPool", ["a"], ["y4"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["g7"], ["y5"]),
             helper.make_node("GlobalAveragePool", ["g14"], ["y6"])]
    feeds = {"x": randn(1, 64, 112, 112), "a": randn(2, 16, 75, 67), "v": randn(1, 16, 8, 40, 40),
             "g7": randn(1, 1152, 7, 7), "g14": randn(1, 672, 14, 14)}
    return _model(nodes, [], feeds, ["y1", "y2", "y3", "y4", "y5", "y6"]), feeds


def _feeds_for(model: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(7)
    feeds = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.fixture(scope="module")
def thread_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("thread-models")
    onnx.save(models.mobilenet_v2(), str(d / "mobilenet_v2.onnx"))
    onnx.save(gemm_model()[0], str(d / "gemm.onnx"))
    onnx.save(bert_like()[0], str(d / "bert_like.onnx"))
    onnx.save(small_image_convs()[0], str(d / "small_image_convs.onnx"))
    onnx.save(conv_epilogues()[0], str(d / "conv_epilogues.onnx"))
    onnx.save(cnn_convs()[0], str(d / "cnn_convs.onnx"))
    onnx.save(int8_cnn()[0], str(d / "int8_cnn.onnx"))
    onnx.save(large_planes()[0], str(d / "large_planes.onnx"))
    onnx.save(small_projections()[0], str(d / "small_projections.onnx"))
    onnx.save(broadcasts()[0], str(d / "broadcasts.onnx"))
    onnx.save(pools()[0], str(d / "pools.onnx"))
    return d


@pytest.fixture(scope="module")
def threaded(thread_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("threads-out")
    build(thread_models, out)
    return out


@pytest.fixture(scope="module")
def unthreaded(thread_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("no-threads-out")
    build(thread_models, out, threads=False)
    return out


# Runs in a fresh interpreter per library (the binding loads one library per process).
RUNNER = r"""
import json, os, sys, time
import numpy as np
import minirt
out, job = sys.argv[1], json.load(open(sys.argv[2]))
def tasks():
    return set(os.listdir("/proc/self/task"))
def alive(tid):
    # A task still listed but already dead (state Z or X) has been joined: the
    # kernel unlists an exiting thread a moment after pthread_join returns.
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False
def left_after_close(workers):
    # The session's own workers (the tasks that appeared while it ran), not a
    # count of every thread in the process: a thread some library starts on its
    # own is no worker of the session. Each must be gone within 10 s of close;
    # one never joined (or never told to exit) stays alive.
    deadline = time.monotonic() + 10.0
    while any(alive(t) for t in workers) and time.monotonic() < deadline:
        time.sleep(0.001)
    return sorted(t for t in workers if alive(t))
report = {}
for name, threads in job["runs"]:
    feeds = dict(np.load(job["feeds"][name]))
    so = minirt.SessionOptions()
    so.intra_op_num_threads = threads
    base = tasks()
    s = minirt.InferenceSession(os.path.join(job["models"], name + ".mrt"), sess_options=so)
    for _ in range(2):
        got = s.run(None, feeds)
    workers = tasks() - base
    s.close()
    report[f"{name}/{threads}"] = {"workers": len(workers), "after_close": left_after_close(workers)}
    np.savez(os.path.join(out, f"{name}_{threads}.npz"), *got)
json.dump(report, open(os.path.join(out, "report.json"), "w"))
"""


def _run_all(out: Path, onnx_dir: Path, names, work: Path) -> dict:
    """Runs every model at every thread count in a fresh interpreter on OUT's
    library; outputs land in WORK/<name>_<threads>.npz. Returns the thread counts seen."""
    abi = toolchain.host_abi()
    work.mkdir(parents=True, exist_ok=True)
    feeds = {}
    for name in names:
        f = work / f"{name}_feeds.npz"
        np.savez(f, **_feeds_for(onnx.load(str(onnx_dir / f"{name}.onnx"))))
        feeds[name] = str(f)
    job = work / "job.json"
    job.write_text(json.dumps({"runs": [(n, t) for n in names for t in THREADS], "feeds": feeds,
                               "models": str(out / "models")}))
    (work / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(out / "linux" / abi / "python")}
    env.pop("MINIRT_LIBRARY", None)
    res = subprocess.run([sys.executable, str(work / "runner.py"), str(work), str(job)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((work / "report.json").read_text())


def _outputs(work: Path, name: str, threads: int) -> list[np.ndarray]:
    with np.load(work / f"{name}_{threads}.npz") as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


NAMES = ("mobilenet_v2", "gemm", "bert_like", "small_image_convs", "conv_epilogues", "cnn_convs", "int8_cnn",
         "large_planes", "small_projections", "broadcasts", "pools")


@pytest.fixture(scope="module")
def threaded_runs(threaded, thread_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("threads-run")
    return work, _run_all(threaded, thread_models, NAMES, work)


@pytest.mark.parametrize("name", NAMES)
def test_outputs_match_across_thread_counts_and_onnxruntime(threaded_runs, thread_models, name):
    work, _ = threaded_runs
    feeds = _feeds_for(onnx.load(str(thread_models / f"{name}.onnx")))
    ref = ortref.reference_session(thread_models / f"{name}.onnx").run(None, feeds)
    one = _outputs(work, name, 1)
    for t in THREADS:
        got = _outputs(work, name, t)
        assert len(got) == len(ref)
        for g, r, o in zip(got, ref, one):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {t} threads")
            # Each output element is computed the same way whatever the split: same bytes.
            np.testing.assert_array_equal(g, o, err_msg=f"{name}: {t} threads differ from 1")


def test_workers_start_per_session_and_are_joined(threaded_runs):
    _, report = threaded_runs
    for name in NAMES:
        assert report[f"{name}/1"]["workers"] == 0, report  # the default: the caller's thread only
        for t in THREADS:
            assert report[f"{name}/{t}"]["after_close"] == [], (name, t, report)  # joined at destroy
    # Big enough to split: N - 1 workers, started at the first parallel loop.
    for t in (2, 4):
        assert report[f"mobilenet_v2/{t}"]["workers"] == t - 1, report
        assert report[f"conv_epilogues/{t}"]["workers"] == t - 1, report
        assert report[f"int8_cnn/{t}"]["workers"] == t - 1, report


def test_no_threads_build_has_no_pthreads_and_still_runs(unthreaded, thread_models, threaded_runs, tmp_path):
    from elftools.elf.elffile import ELFFile
    lib = unthreaded / "linux" / toolchain.host_abi() / "lib" / "libminirt.so"
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        needed = [t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        syms = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    assert not any("pthread" in n for n in needed), needed
    assert not any(s.startswith("pthread") for s in syms), sorted(s for s in syms if "pthread" in s)
    assert "mrt_session_create_with_options" in syms
    report = _run_all(unthreaded, thread_models, NAMES, tmp_path)
    for name in NAMES:
        for t in THREADS:
            assert report[f"{name}/{t}"]["workers"] == 0, report
            for g, o in zip(_outputs(tmp_path, name, t), _outputs(threaded_runs[0], name, 1)):
                np.testing.assert_array_equal(g, o)


def test_threaded_linux_library_keeps_the_manylinux2014_policy(threaded):
    from elftools.elf.elffile import ELFFile
    lib = threaded / "linux" / toolchain.host_abi() / "lib" / "libminirt.so"
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        needed = {t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"}
        versions = set()
        vn = elf.get_section_by_name(".gnu.version_r")
        for verneed, aux in vn.iter_versions():
            versions.update(a.name for a in aux)
    assert needed <= {"libc.so.6", "libpthread.so.0", "libm.so.6"}, needed
    glibc = [tuple(map(int, v[6:].split("."))) for v in versions if v.startswith("GLIBC_")]
    assert max(glibc) <= (2, 17), sorted(versions)


def test_python_session_options_like_onnxruntime(threaded):
    code = textwrap.dedent("""
        import minirt, onnxruntime as ort
        so = minirt.SessionOptions()
        assert so.intra_op_num_threads == 0
        so.intra_op_num_threads = 2
        for bad, exc in ((-1, ValueError), (65, ValueError), (1.5, TypeError), (True, TypeError)):
            try:
                so.intra_op_num_threads = bad
            except exc:
                pass
            else:
                raise AssertionError(bad)
        assert so.intra_op_num_threads == 2 and "2" in repr(so)
        s = minirt.InferenceSession(MODEL, sess_options=so)
        o = ort.SessionOptions(); o.intra_op_num_threads = 2   # onnxruntime's own options work too
        s2 = minirt.InferenceSession(MODEL, sess_options=o)
        s3 = minirt.InferenceSession(MODEL)
        print("ok")
    """).replace("MODEL", repr(str(threaded / "models" / "gemm.mrt")))
    env = {**os.environ, "PYTHONPATH": str(threaded / "linux" / toolchain.host_abi() / "python")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


def test_c_api_rejects_bad_thread_counts(threaded):
    import ctypes
    lib = ctypes.CDLL(str(threaded / "linux" / toolchain.host_abi() / "lib" / "libminirt.so"))

    class Opts(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint32), ("threads", ctypes.c_int32), ("reserved", ctypes.c_uint32 * 6)]

    data = (threaded / "models" / "gemm.mrt").read_bytes()
    f = lib.mrt_session_create_with_options
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Opts), ctypes.POINTER(ctypes.c_void_p),
                  ctypes.c_char_p, ctypes.c_size_t]
    lib.mrt_session_destroy.argtypes = [ctypes.c_void_p]
    for threads, want in ((-1, 1), (65, 1), (0, 0), (64, 0)):
        h, err = ctypes.c_void_p(), ctypes.create_string_buffer(256)
        st = f(data, len(data), ctypes.byref(Opts(0, threads)), ctypes.byref(h), err, 256)
        assert st == want, (threads, st, err.value)
        if st:
            assert b"intra_op_num_threads" in err.value and not h.value
        lib.mrt_session_destroy(h)
    h, err = ctypes.c_void_p(), ctypes.create_string_buffer(256)
    assert f(data, len(data), None, ctypes.byref(h), err, 256) == 0  # NULL options: the defaults
    lib.mrt_session_destroy(h)


# --------------------------------------------------------------------------- Java

JAVA_CHECK = r"""
import ai.minibuild.minirt.*;
import java.nio.*;
import java.nio.file.*;

public class ThreadsCheck {
    static void write(String path, float[] v) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(4 * v.length).order(ByteOrder.nativeOrder());
        b.asFloatBuffer().put(v);
        Files.write(Paths.get(path), b.array());
    }

    public static void main(String[] a) throws Exception {
        String model = a[0], out = a[2];
        byte[] in = Files.readAllBytes(Paths.get(a[1]));
        float[] x = new float[in.length / 4];
        ByteBuffer.wrap(in).order(ByteOrder.nativeOrder()).asFloatBuffer().get(x);
        try {
            new MiniRtSession.Options().setIntraOpNumThreads(-1);
            System.out.println("no exception");
        } catch (IllegalArgumentException e) {
            System.out.println("rejected " + e.getMessage());
        }
        for (int t : new int[] {1, 2, 4}) {
            MiniRtSession.Options o = new MiniRtSession.Options().setIntraOpNumThreads(t);
            try (MiniRtSession s = MiniRtSession.fromFile(model, o)) {
                write(out + "file_" + o.getIntraOpNumThreads() + ".bin", s.run(x));
            }
            try (MiniRtSession s = MiniRtSession.fromBytes(Files.readAllBytes(Paths.get(model)), o)) {
                write(out + "bytes_" + t + ".bin", s.run(x));
            }
            byte[] m = Files.readAllBytes(Paths.get(model));
            ByteBuffer direct = ByteBuffer.allocateDirect(m.length);
            direct.put(m).flip();
            try (MiniRtSession s = MiniRtSession.fromByteBuffer(direct, o)) {
                write(out + "direct_" + t + ".bin", s.run(x));
            }
        }
        try {
            MiniRtSession.fromFile("/nonexistent/model.mrt", new MiniRtSession.Options().setIntraOpNumThreads(2));
        } catch (MiniRtException e) {
            System.out.println("error " + e.getMessage());
        }
        System.out.println("done");
    }
}
"""


def test_java_options_on_host_jvm(tmp_path):
    from minibuild.platforms import android
    try:
        jdk = android.find_jdk()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no JDK: {e}")
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    m = models.mobilenet_v2(size=64, classes=10)
    onnx.save(m, str(models_dir / "mnv2.onnx"))
    res = pipeline.run_scan(pipeline.Options(models=models_dir, out=tmp_path / "out"))
    mrt = pipeline.convert_models(res, tmp_path / "out" / "models")
    plan, tb = build_mod.plan_target(android.VERIFY_TARGETS["host-jni"], res.registry, res.manifest,
                                     tmp_path / "out" / "build")
    build_mod.run_scons([plan], tmp_path / "out" / "build")
    (tmp_path / "classes.jar").write_bytes(android.compile_java(tmp_path / "java"))
    (tmp_path / "ThreadsCheck.java").write_text(JAVA_CHECK)
    cp = f"{tmp_path / 'classes.jar'}:{tmp_path}"
    subprocess.run([jdk.tool("javac"), "-cp", cp, "-d", str(tmp_path), str(tmp_path / "ThreadsCheck.java")],
                   check=True, capture_output=True)
    feeds = _feeds_for(m)
    (x,) = feeds.values()
    x.tofile(tmp_path / "in.bin")
    proc = subprocess.run([jdk.tool("java"), "-Xcheck:jni", f"-D{android.JAVA_PACKAGE}.library={tb.library}",
                           "-cp", cp, "ThreadsCheck", str(mrt["mnv2"]), str(tmp_path / "in.bin"), str(tmp_path / "o_")],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    assert "rejected intraOpNumThreads must be 0..64, got -1" in proc.stdout, proc.stdout
    assert re.search(r"error \[IO_ERROR\] cannot open '/nonexistent/model.mrt'", proc.stdout), proc.stdout
    import onnxruntime as ort
    (ref,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    one = np.fromfile(tmp_path / "o_file_1.bin", dtype=np.float32)
    np.testing.assert_allclose(one.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
    for way in ("file", "bytes", "direct"):
        for t in THREADS:
            np.testing.assert_array_equal(np.fromfile(tmp_path / f"o_{way}_{t}.bin", dtype=np.float32), one,
                                          err_msg=f"{way} at {t} threads")


# --------------------------------------------------------------------------- ThreadSanitizer

TSAN_DRIVER = r"""
/* Runs each model at 1 thread, then at N threads several times, and checks the
 * outputs are the same bytes. ThreadSanitizer reports any race on the way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "minirt.h"

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(*len);
  if (fread(buf, 1, *len, f) != *len) { free(buf); buf = NULL; }
  fclose(f);
  return buf;
}

static mrt_session *open_session(const unsigned char *m, size_t len, int threads) {
  mrt_session_options o = {0};
  o.intra_op_num_threads = threads;
  mrt_session *s = NULL;
  char err[256];
  if (mrt_session_create_with_options(m, len, &o, &s, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(2); }
  for (size_t i = 0; i < mrt_session_input_count(s); i++) {
    mrt_tensor_info info;
    mrt_session_input_info(s, i, &info);
    float *x = mrt_session_input_data(s, i);
    for (size_t k = 0; k < info.nbytes / 4; k++) x[k] = (float)((k * 2654435761u) % 1000) / 500.0f - 1.0f;
  }
  return s;
}

int main(int argc, char **argv) {
  int threads = atoi(argv[1]);
  for (int a = 2; a < argc; a++) {
    size_t len;
    unsigned char *m = read_file(argv[a], &len);
    if (!m) return 3;
    mrt_session *ref = open_session(m, len, 1), *s = open_session(m, len, threads);
    if (mrt_session_run(ref)) return 4;
    for (int r = 0; r < 3; r++) {
      if (mrt_session_run(s)) return 4;
      for (size_t i = 0; i < mrt_session_output_count(s); i++) {
        mrt_tensor_info info;
        mrt_session_output_info(s, i, &info);
        if (memcmp(mrt_session_output_data(s, i), mrt_session_output_data(ref, i), info.nbytes)) {
          fprintf(stderr, "%s: output %zu differs at %d threads\n", argv[a], i, threads);
          return 5;
        }
      }
    }
    mrt_session_destroy(s);
    mrt_session_destroy(ref);
    free(m);
    printf("ok %s\n", argv[a]);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def tsan_driver(thread_models, threaded, tmp_path_factory):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("Debian's clang (apt-get install clang libclang-rt-14-dev) builds the ThreadSanitizer driver")
    work = tmp_path_factory.mktemp("tsan")
    res = pipeline.run_scan(pipeline.Options(models=thread_models, out=work / "scan"))
    codegen.render(res.registry, res.manifest, work / "gen")
    src = resources.path("kernels_src")
    units = [(src / r, []) for r in build_mod.RUNTIME_SOURCES]
    support = set()
    for u in build_mod.kernel_units(res.registry, res.manifest):
        support.update(u["requires"])
        units.append((src / u["source"], [f"-D{d}" for d in u["defines"]]))
    units += [(src / res.registry.support[s].source, []) for s in sorted(support)]
    units.append((work / "gen" / "registry.c", []))
    (work / "driver.c").write_text(TSAN_DRIVER)
    units.append((work / "driver.c", []))
    flags = ["-std=c11", "-O1", "-g", "-fsanitize=thread", "-fno-omit-frame-pointer", "-D_GNU_SOURCE",
             "-I", str(src / "include"), "-I", str(src / "runtime"), "-I", str(src / "kernels"), "-I", str(work / "gen")]
    objs, procs = [], []
    for i, (path, defs) in enumerate(units):
        obj = work / f"u{i}.o"
        procs.append(subprocess.Popen([clang, *flags, *defs, "-c", str(path), "-o", str(obj)],
                                      stderr=subprocess.PIPE, text=True))
        objs.append(str(obj))
        if len(procs) >= 2:
            p = procs.pop(0)
            assert p.wait() == 0, p.stderr.read()
    for p in procs:
        assert p.wait() == 0, p.stderr.read()
    exe = work / "tsan_driver"
    link = subprocess.run([clang, "-fsanitize=thread", *objs, "-lm", "-lpthread", "-o", str(exe)],
                          capture_output=True, text=True)
    assert link.returncode == 0, link.stderr[-3000:]
    return exe


@pytest.mark.parametrize("threads", [2, 4])
def test_no_data_race_under_thread_sanitizer(tsan_driver, threaded, threads):
    mrts = [str(threaded / "models" / f"{n}.mrt") for n in NAMES]
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1"}
    res = subprocess.run([str(tsan_driver), str(threads), *mrts], env=env, capture_output=True, text=True,
                         timeout=900)
    assert "ThreadSanitizer" not in res.stderr, res.stderr[-6000:]
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count("ok ") == len(mrts)


POOL_CHECK = r"""
/* The pool's claiming on its own, at N threads: every task of a loop runs
 * exactly once, on a thread in range, never two at once on one thread; each
 * thread's run starts on its owner; a worker held in a task has the rest of
 * its run taken by the others; loops of every size, back to back. Built with
 * ThreadSanitizer, which reports any race on the way. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "internal.h"

#define MAX_TASKS 5000
static size_t hits[MAX_TASKS], owner[MAX_TASKS], busy[64], started[64];
static size_t n_threads, n_tasks, started_count, blocker, blocker_thread, done_count;
static const char *failure;

enum { PLAIN, FIRST_ON_OWNER, BLOCK_ONE };
static int mode;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until *v reaches want; a check that never holds fails after 60 s. */
static void wait_for(size_t *v, size_t want, const char *what) {
  const double t0 = now();
  while (__atomic_load_n(v, __ATOMIC_ACQUIRE) < want) {
    if (now() - t0 > 60) {
      __atomic_store_n(&failure, what, __ATOMIC_RELAXED);
      return;
    }
    sched_yield();
  }
}

static void fail(const char *what) { __atomic_store_n(&failure, what, __ATOMIC_RELAXED); }

static void task(void *arg, size_t t, size_t thread) {
  (void)arg;
  if (thread >= n_threads) {
    fail("thread index out of range");
    return;
  }
  if (__atomic_exchange_n(&busy[thread], 1, __ATOMIC_ACQ_REL)) fail("two tasks at once on one thread");
  hits[t]++; /* a task runs once: a second run would race with the first under ThreadSanitizer */
  owner[t] = thread;
  if (mode == FIRST_ON_OWNER && !started[thread]) {
    /* Nobody steals before finishing its own run, and nobody finishes a first
     * task before every thread has begun one: so each run's first task is its owner's. */
    started[thread] = 1;
    __atomic_fetch_add(&started_count, 1, __ATOMIC_ACQ_REL);
    wait_for(&started_count, n_threads, "the threads never all began a task");
  }
  if (mode == BLOCK_ONE) {
    if (thread != 0 && !__atomic_exchange_n(&blocker, 1, __ATOMIC_ACQ_REL)) {
      blocker_thread = thread;
      wait_for(&done_count, n_tasks - 1, "a busy worker's run was not taken by the others");
    } else {
      /* The caller holds its first task until a worker holds one. */
      if (thread == 0 && t == 0) wait_for(&blocker, 1, "no worker began a task");
      __atomic_fetch_add(&done_count, 1, __ATOMIC_ACQ_REL);
    }
  }
  __atomic_store_n(&busy[thread], 0, __ATOMIC_RELEASE);
}

static int loop(struct mrt_pool *p, size_t n, int m) {
  n_tasks = n;
  mode = m;
  started_count = blocker = done_count = 0;
  for (size_t t = 0; t < 64; ++t) started[t] = 0;
  mrt_parallel_for(p, n, task, NULL);
  const char *f = __atomic_load_n(&failure, __ATOMIC_RELAXED);
  if (f) {
    fprintf(stderr, "%zu threads, %zu tasks: %s\n", n_threads, n, f);
    return 1;
  }
  for (size_t t = 0; t < n; ++t) {
    if (hits[t] != 1) {
      fprintf(stderr, "%zu threads, %zu tasks: task %zu ran %zu times\n", n_threads, n, t, hits[t]);
      return 1;
    }
    hits[t] = 0;
  }
  if (m == FIRST_ON_OWNER)
    for (size_t th = 0; th < n_threads; ++th) {
      const size_t first = (th * n + n_threads - 1) / n_threads;
      if (owner[first] != th) {
        fprintf(stderr, "%zu threads, %zu tasks: task %zu (thread %zu's first) ran on thread %zu\n", n_threads, n,
                first, th, owner[first]);
        return 1;
      }
    }
  if (m == BLOCK_ONE) {
    size_t mine = 0;
    for (size_t t = 0; t < n; ++t) mine += owner[t] == blocker_thread;
    if (!blocker || mine != 1) {
      fprintf(stderr, "%zu threads, %zu tasks: the held worker (%zu, %zu) ran %zu tasks:", n_threads, n, blocker, blocker_thread, mine);
      for (size_t t = 0; t < n; ++t) fprintf(stderr, " %zu", owner[t]);
      fprintf(stderr, "\n");
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  n_threads = argc > 1 ? (size_t)atoi(argv[1]) : 2;
  /* A pool destroyed before any loop started its workers. */
  mrt_pool_destroy(mrt_pool_create(n_threads));
  struct mrt_pool *p = mrt_pool_create(n_threads);
  if (!p || mrt_pool_threads(p) != n_threads) return 2;
  const size_t T = n_threads;
  const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 63, 64, 100, 1000, 4999, T - 1, T, T + 1, 2 * T, 3 * T + 1};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; ++s)
    for (int r = 0; r < 40; ++r)
      if (loop(p, sizes[s], PLAIN)) return 1;
  /* Fewer tasks than threads: one run each for some, none for the others. */
  for (size_t n = 2; n < T; ++n)
    for (int r = 0; r < 40; ++r)
      if (loop(p, n, PLAIN)) return 1;
  const size_t owned[] = {T, 2 * T, 3 * T + 1, 64};
  for (size_t s = 0; s < sizeof owned / sizeof *owned; ++s)
    for (int r = 0; r < 10; ++r)
      if (loop(p, owned[s], FIRST_ON_OWNER)) return 1;
  const size_t held[] = {2 * T, 4 * T + 1, 64, 1000};
  for (size_t s = 0; s < sizeof held / sizeof *held; ++s)
    for (int r = 0; r < 10; ++r)
      if (loop(p, held[s], BLOCK_ONE)) return 1;
  /* Back to back, as a model's layers run: sizes changing every loop. */
  for (size_t i = 0; i < 20000; ++i)
    if (loop(p, 2 + (i * 7919) % 37, PLAIN)) return 1;
  mrt_pool_destroy(p);
  printf("ok %zu threads\n", n_threads);
  return 0;
}
"""


@pytest.fixture(scope="module")
def pool_check(tmp_path_factory):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("Debian's clang (apt-get install clang libclang-rt-14-dev) builds the ThreadSanitizer driver")
    work = tmp_path_factory.mktemp("pool-check")
    (work / "config.h").write_text("#define MRT_ENABLE_MESSAGES 1\n#define MRT_ENABLE_THREADS 1\n#define MRT_TUNE_SIZE 0\n")
    (work / "pool_check.c").write_text(POOL_CHECK)
    src = resources.path("kernels_src")
    exe = work / "pool_check"
    res = subprocess.run([clang, "-std=c11", "-O1", "-g", "-fsanitize=thread", "-D_GNU_SOURCE", "-I", str(work),
                          "-I", str(src / "include"), "-I", str(src / "runtime"), str(work / "pool_check.c"),
                          str(src / "runtime" / "threadpool.c"), "-lpthread", "-o", str(exe)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return exe


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_pool_claims_each_task_once_and_steals_under_thread_sanitizer(pool_check, threads):
    """Loops of 1 to 4,999 tasks (fewer than the threads, as many, more), a run's
    first task on its owner, a worker held in a task while the others take the
    rest of its run, 20,000 loops back to back."""
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}
    res = subprocess.run([str(pool_check), str(threads)], env=env, capture_output=True, text=True, timeout=600)
    assert "ThreadSanitizer" not in res.stderr, res.stderr[-6000:]
    assert res.returncode == 0 and f"ok {threads} threads" in res.stdout, res.stdout + res.stderr[-3000:]

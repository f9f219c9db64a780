"""Seed models for the fuzzers, one per kernel family, small enough that a mutated
copy loads, prepares and runs in well under a millisecond (the weights are tiny:
the fuzzers mutate structure, and every byte of weights costs checksum time).

    python tests/fuzz/seeds.py OUT_DIR      writes OUT_DIR/<name>.mrt, says what it skipped

Each seed is an ONNX graph built with onnx.helper and converted the way a build
converts it (minibuild.testing.convert_model): optimised, shapes fixed, the memory
plan written. A seed whose operators are not (yet) in the registry is skipped with
the names of the missing ones, so the seed set grows with the registry.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


@dataclass
class Seed:
    name: str
    ops: set[str]                         # ai.onnx ops (and ai.minibuild ones as "ai.minibuild.X") it needs
    build: Callable[[], tuple[onnx.ModelProto, dict, list[str]]]  # model, feeds, constant inputs
    fused_ops: set[str] = field(default_factory=set)  # ops the build's fusions make ...
    fused_from: set[str] = field(default_factory=set)  # ... out of these, which then are gone

    def converted_ops(self) -> set[str]:
        """The ops the converted model holds."""
        return (self.ops - self.fused_from) | self.fused_ops


def _rng(seed):
    return np.random.default_rng(seed)


def _model(nodes, inputs, outputs, inits, opset, domains=()):
    graph = helper.make_graph(nodes, "fuzz_seed", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 9
    # Output shapes as onnx infers them: the build wants static shapes.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if out.name in known:
            out.type.CopyFrom(known[out.name].type)
    return model


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def transformer():
    """One attention + MLP block at opset 20: batched MatMul (rank 3 and a broadcast
    rank-4 head split), Softmax, LayerNormalization with a bias, Gelu (both the
    tanh and the exact form), Erf, Pow, ReduceSum/Mean/Max with axes inputs."""
    r = _rng(11)
    t, d, h = 5, 8, 16
    w = lambda *s: (r.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "scale": np.array(0.35, np.float32),
             "g": w(d) + 1, "b": w(d), "w1": w(d, h), "b1": w(h), "w2": w(h, d),
             "heads": np.array([1, t, 2, d // 2], np.int64), "two": np.array(2.0, np.float32),
             "ax_last": np.array([-1], np.int64), "ax_mid": np.array([1], np.int64),
             "ax_both": np.array([0, 2], np.int64), "wh": w(1, 2, d // 2, 3)}
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["ctx"]),
        helper.make_node("Add", ["ctx", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Gelu", ["h1"], ["h2"], approximate="tanh"),
        helper.make_node("Gelu", ["h1"], ["h3"]),
        helper.make_node("Erf", ["h3"], ["h4"]),
        helper.make_node("Add", ["h2", "h4"], ["h5"]),
        helper.make_node("MatMul", ["h5", "w2"], ["m"]),
        helper.make_node("Pow", ["m", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "ax_last"], ["var"], keepdims=1),
        helper.make_node("ReduceSum", ["m", "ax_mid"], ["sum"], keepdims=0),
        helper.make_node("ReduceMax", ["m", "ax_both"], ["mx"], keepdims=1),
        # A head split: [1, t, 2, d/2] -> [1, 2, t, d/2], times a broadcast [1, 2, d/2, 3].
        helper.make_node("Reshape", ["ln", "heads"], ["lh"]),
        helper.make_node("Transpose", ["lh"], ["lt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["lt", "wh"], ["hm"]),
    ]
    x = r.standard_normal((1, t, d)).astype(np.float32)
    outputs = [_vi(n, F, None) for n in ("var", "sum", "mx", "hm")]
    return _model(nodes, [_vi("x", F, x.shape)], outputs, inits, 20), {"x": x}, []


def vision():
    """Resize (linear with scales, nearest with sizes, cubic), ConvTranspose (strided,
    padded, grouped), PRelu with a per-channel slope, Mish and the Sigmoid*x pattern
    the build fuses into ai.minibuild.SiLU; one antialiased Resize takes its scales at
    run time."""
    r = _rng(12)
    c = 4
    inits = {"roi": np.array([], np.float32), "sc2": np.array([1, 1, 2, 2], np.float32),
             "sizes": np.array([1, c, 7, 5], np.int64), "sc15": np.array([1, 1, 1.5, 1.5], np.float32),
             "wt": (r.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32),
             "bt": r.standard_normal(3).astype(np.float32),
             "wg": (r.standard_normal((c, 1, 2, 2)) * 0.3).astype(np.float32),
             "slope": (r.standard_normal((3, 1, 1)) * 0.2).astype(np.float32)}
    nodes = [
        helper.make_node("Resize", ["x", "roi", "sc2"], ["up"], mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Resize", ["x", "roi", "", "sizes"], ["nn"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Resize", ["x", "roi", "sc15"], ["cu"], mode="cubic",
                         coordinate_transformation_mode="align_corners"),
        helper.make_node("ConvTranspose", ["up", "wt", "bt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 0]),
        helper.make_node("PRelu", ["ct", "slope"], ["pr"]),
        helper.make_node("Mish", ["pr"], ["mi"]),
        helper.make_node("ConvTranspose", ["nn", "wg"], ["cg"], group=c, strides=[1, 2], dilations=[2, 1]),
        helper.make_node("Sigmoid", ["cg"], ["sg"]),
        helper.make_node("Mul", ["cg", "sg"], ["si"]),
        # Scales fed at run time (the output size is fixed at build time): an
        # antialiased downsample whose filter tables are built on every run.
        helper.make_node("Resize", ["x", "roi", "rs"], ["dn"], mode="linear", antialias=1),
    ]
    x = r.standard_normal((1, c, 6, 4)).astype(np.float32)  # 1.5x stays integral
    rs = np.array([1, 1, 0.5, 0.5], np.float32)
    outputs = [_vi(n, F, None) for n in ("mi", "si", "cu")] + [_vi("dn", F, [1, c, 3, 2])]
    inputs = [_vi("x", F, x.shape), _vi("rs", F, rs.shape)]
    return _model(nodes, inputs, outputs, inits, 19), {"x": x, "rs": rs}, []


def typed():
    """The typed kernels a tokenised model needs: Gather of an embedding table by
    run-time int64 ids (and by constant int32 ones), Equal against a constant, Where
    on the bool mask, Cast float32 -> int64 -> float32, Expand to a bigger shape."""
    r = _rng(13)
    inits = {"table": r.standard_normal((10, 6)).astype(np.float32),
             "cids": np.array([[1, -2], [0, 9]], np.int32),
             "pad": np.array(0, np.int64), "zero": np.zeros((1, 6), np.float32),
             "eshape": np.array([2, 4, 6], np.int64)}
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Gather", ["table", "cids"], ["cemb"], axis=0),
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Unsqueeze", ["is_pad", "ax1"], ["mask"]),
        helper.make_node("Where", ["mask", "zero", "emb"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["mi"], to=TensorProto.INT64),
        helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Expand", ["mf", "eshape"], ["y"]),
        helper.make_node("Gather", ["cemb", "ids"], ["y2"], axis=2),
    ]
    inits["ax1"] = np.array([1], np.int64)
    ids = np.array([3, 0, 5, 1], np.int64)
    outputs = [_vi("y", F, None), _vi("y2", F, None)]
    model = _model(nodes, [_vi("ids", TensorProto.INT64, ids.shape)], outputs, inits, 13)
    return model, {"ids": ids}, []


def typed_logic():
    """Comparisons, boolean logic and the rest of the typed copies: Less/Greater on
    int64 and float32, And/Or/Not, IsNaN, GatherElements and GatherND on run-time
    indices, Cast bool -> float32. (Range is not here: its inputs must be build-time
    constants, so the build folds it and no converted model contains it.)"""
    r = _rng(14)
    inits = {"lim": np.array(2, np.int64), "half": np.array(0.0, np.float32),
             "scale": np.array([1.0, 1.5, 2.0, 2.5, 3.0], np.float32)}
    nodes = [
        helper.make_node("Less", ["ids", "lim"], ["lt"]),
        helper.make_node("Greater", ["x", "half"], ["gt"]),
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("Not", ["nan"], ["ok"]),
        helper.make_node("And", ["gt", "ok"], ["pos"]),
        helper.make_node("Or", ["pos", "lt"], ["any"]),
        helper.make_node("Cast", ["any"], ["anyf"], to=TensorProto.FLOAT),
        helper.make_node("GatherElements", ["x", "ids"], ["ge"], axis=1),
        helper.make_node("Add", ["ge", "anyf"], ["y"]),
        helper.make_node("GatherND", ["x", "nd"], ["gnd"], batch_dims=0),
        helper.make_node("Mul", ["gnd", "scale"], ["y2"]),
    ]
    x = r.standard_normal((3, 5)).astype(np.float32)
    ids = np.array([[0, 4, 1, 2, 3], [1, 1, 0, -1, 2], [4, 3, 2, 1, 0]], np.int64)
    nd = np.array([[0, 1], [2, 4], [1, 3], [0, 0], [2, 2]], np.int64)
    inputs = [_vi("x", F, x.shape), _vi("ids", TensorProto.INT64, ids.shape), _vi("nd", TensorProto.INT64, nd.shape)]
    outputs = [_vi("y", F, None), _vi("y2", F, None)]
    return _model(nodes, inputs, outputs, inits, 13), {"x": x, "ids": ids, "nd": nd}, []


U8, I8 = TensorProto.UINT8, TensorProto.INT8
MS = "com.microsoft"


def _qp(inits, name, scale, zp):
    """Adds a scale / zero-point constant pair; returns their names."""
    inits[f"{name}_s"], inits[f"{name}_z"] = np.array(scale, np.float32), np.asarray(zp)
    return f"{name}_s", f"{name}_z"


def int8_qdq():
    """A QDQ graph the build lowers to int8 kernels: QLinearAdd, QLinearAveragePool
    (padded, ceil_mode), QLinearConcat of pieces with other scales, MaxPool on uint8,
    QLinearSigmoid, QLinearLeakyRelu and QLinearGlobalAveragePool; the float input
    quantised and the output dequantised. (No QLinearConv: fuzzing its prepare finds a
    signed overflow of in + pads on huge pads, which qconv.c must check first.)"""
    r = _rng(15)
    inits = {}
    q = {k: _qp(inits, k, s, np.uint8(z)) for k, s, z in
         [("x", 0.04, 128), ("a", 0.06, 110), ("p", 0.05, 100), ("k", 0.07, 128), ("g", 0.004, 0),
          ("l", 0.03, 60), ("o", 0.02, 90)]}

    def dq(src, key, out):
        return helper.make_node("DequantizeLinear", [src, *q[key]], [out])

    def qn(src, key, out):
        return helper.make_node("QuantizeLinear", [src, *q[key]], [out])
    nodes = [
        qn("x", "x", "xq"), dq("xq", "x", "xf"), dq("xq", "x", "xf2"),
        helper.make_node("Add", ["xf", "xf2"], ["af"]), qn("af", "a", "aq"), dq("aq", "a", "af2"),
        helper.make_node("AveragePool", ["af2"], ["pf"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         ceil_mode=1), qn("pf", "p", "pq"), dq("pq", "p", "pf2"),
        helper.make_node("MaxPool", ["pf2"], ["mf"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
        qn("mf", "p", "mq"), dq("mq", "p", "mf2"),
        helper.make_node("Sigmoid", ["mf2"], ["sf"]), qn("sf", "g", "sq"), dq("sq", "g", "sf2"),
        helper.make_node("LeakyRelu", ["mf2"], ["lf"], alpha=0.1), qn("lf", "l", "lq"), dq("lq", "l", "lf2"),
        helper.make_node("Concat", ["sf2", "lf2", "pf2"], ["kf"], axis=1), qn("kf", "k", "kq"),
        dq("kq", "k", "kf2"),
        helper.make_node("GlobalAveragePool", ["kf2"], ["of"]), qn("of", "o", "oq"), dq("oq", "o", "y"),
    ]
    x = r.standard_normal((1, 3, 9, 8)).astype(np.float32)
    return _model(nodes, [_vi("x", F, x.shape)], [_vi("y", F, None)], inits, 13), {"x": x}, []


def int8_qoperator():
    """The QOperator form on int8 (signed): com.microsoft QLinearLeakyRelu,
    QLinearConcat, QLinearAveragePool (channels_last, count_include_pad), QLinearMul,
    QLinearMatMul and QGemm; beside them QLinearConv, dense (stride 2, per-channel
    weights, bias) and depthwise (dilated)."""
    r = _rng(16)
    inits = {"mw": r.integers(-60, 60, (4, 5)).astype(np.int8), "gw": r.integers(-60, 60, (3, 6)).astype(np.int8),
             "gb": r.integers(-99, 99, 3).astype(np.int32),
             "cw": r.integers(-60, 60, (3, 2, 3, 3)).astype(np.int8), "cw_s": np.array([0.02, 0.03, 0.01], np.float32),
             "cw_z": np.zeros(3, np.int8), "cb": r.integers(-99, 99, 3).astype(np.int32),
             "dw": r.integers(-60, 60, (2, 1, 3, 3)).astype(np.int8)}
    q = {k: _qp(inits, k, s, np.int8(z)) for k, s, z in
         [("x", 0.05, 3), ("c", 0.06, -5), ("k", 0.08, 0), ("p", 0.07, 2), ("l", 0.04, -20), ("u", 0.1, 1),
          ("mw", 0.02, 0), ("mm", 0.09, -3), ("gw", 0.03, 0), ("gg", 0.2, 4), ("v", 0.15, -1), ("dw", 0.02, 0),
          ("d", 0.12, 2)]}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *q["x"]], ["xq"]),
        helper.make_node("QLinearLeakyRelu", ["xq", *q["x"], *q["c"]], ["cq"], alpha=0.3, domain=MS),
        helper.make_node("QLinearConcat", [*q["k"], "cq", *q["c"], "xq", *q["x"]], ["kq"], axis=1, domain=MS),
        helper.make_node("Transpose", ["kq"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("QLinearAveragePool", ["kt", *q["k"], *q["p"]], ["pq"], kernel_shape=[2, 3],
                         strides=[2, 1], pads=[1, 1, 0, 1], count_include_pad=1, channels_last=1, domain=MS),
        helper.make_node("QLinearLeakyRelu", ["pq", *q["p"], *q["l"]], ["lq"], alpha=0.2, domain=MS),
        helper.make_node("QLinearMul", ["lq", *q["l"], "pq", *q["p"], *q["u"]], ["uq"], domain=MS),
        helper.make_node("QLinearMatMul", ["uq", *q["u"], "mw", *q["mw"], *q["mm"]], ["mq"]),
        helper.make_node("Reshape", ["mq", "flat"], ["fq"]),
        helper.make_node("QGemm", ["fq", *q["mm"], "gw", *q["gw"], "gb", *q["gg"]], ["gq"], transB=1, domain=MS),
        helper.make_node("DequantizeLinear", ["gq", *q["gg"]], ["y"]),
        helper.make_node("QLinearConv", ["xq", *q["x"], "cw", "cw_s", "cw_z", *q["v"], "cb"], ["vq"],
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0]),
        helper.make_node("DequantizeLinear", ["vq", *q["v"]], ["y2"]),
        helper.make_node("QLinearConv", ["xq", *q["x"], "dw", *q["dw"], *q["d"]], ["dq"], kernel_shape=[3, 3],
                         group=2, dilations=[2, 1], pads=[2, 1, 2, 1]),
        helper.make_node("DequantizeLinear", ["dq", *q["d"]], ["y3"]),
    ]
    inits["flat"] = np.array([-1, 6], np.int64)
    x = r.standard_normal((1, 2, 5, 6)).astype(np.float32)
    outputs = [_vi("y", F, [15, 3]), _vi("y2", F, [1, 3, 3, 3]), _vi("y3", F, [1, 2, 5, 6])]
    model = _model(nodes, [_vi("x", F, x.shape)], outputs, inits, 13, domains=(MS,))
    return model, {"x": x}, []


def int8_pools():
    """QDQ on uint8, lowered to the pooling and concat kernels alone: QLinearAveragePool
    (padded, ceil_mode; count_include_pad), QLinearConcat of pieces with other scales,
    a Concat of equal parameters run on the uint8 values, MaxPool on uint8."""
    r = _rng(18)
    inits = {}
    q = {k: _qp(inits, k, s, np.uint8(z)) for k, s, z in [("x", 0.04, 128), ("p", 0.05, 100), ("c", 0.06, 90)]}
    nodes = [helper.make_node("QuantizeLinear", ["x", *q["x"]], ["xq"])]

    def group(op, srcs, key_in, key_out, out, **attrs):
        """DequantizeLinear of each source -> op -> QuantizeLinear into `out`."""
        fs = []
        for i, (src, k) in enumerate(zip(srcs, key_in)):
            fs.append(f"{out}_in{i}")
            nodes.append(helper.make_node("DequantizeLinear", [src, *q[k]], [fs[-1]]))
        nodes.append(helper.make_node(op, fs, [f"{out}_f"], **attrs))
        nodes.append(helper.make_node("QuantizeLinear", [f"{out}_f", *q[key_out]], [out]))
        return out
    aq = group("AveragePool", ["xq"], "x", "p", "aq", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0],
               ceil_mode=1)
    bq = group("AveragePool", ["xq"], "x", "p", "bq", kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 1],
               count_include_pad=1)
    mq = group("MaxPool", ["xq"], "x", "x", "mq", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    kq = group("Concat", [aq, mq, bq], "pxp", "c", "kq", axis=1)
    eq = group("Concat", [aq, bq], "pp", "p", "eq", axis=3)
    nodes += [helper.make_node("DequantizeLinear", [kq, *q["c"]], ["y"]),
              helper.make_node("DequantizeLinear", [eq, *q["p"]], ["y2"])]
    x = r.standard_normal((1, 3, 9, 8)).astype(np.float32)
    return _model(nodes, [_vi("x", F, x.shape)], [_vi("y", F, None), _vi("y2", F, None)], inits, 13), {"x": x}, []


def int8_qop_pools():
    """QOperator on int8: MaxPool on int8, com.microsoft QLinearAveragePool (NCHW 1-D
    and 2-D, channels_last) and QLinearConcat (a copied piece and a requantised one)."""
    r = _rng(19)
    inits = {}
    q = {k: _qp(inits, k, s, np.int8(z)) for k, s, z in [("x", 0.05, 3), ("p", 0.07, -2), ("k", 0.05, 3)]}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *q["x"]], ["xq"]),
        helper.make_node("MaxPool", ["xq"], ["mq"], kernel_shape=[2, 2], strides=[1, 1], pads=[1, 1, 0, 0]),
        helper.make_node("QLinearAveragePool", ["xq", *q["x"], *q["p"]], ["pq"], kernel_shape=[2, 2],
                         pads=[1, 1, 0, 0], domain=MS),
        helper.make_node("QLinearConcat", [*q["k"], "mq", *q["x"], "pq", *q["p"]], ["kq"], axis=1, domain=MS),
        helper.make_node("QLinearAveragePool", ["kq", *q["k"], *q["p"]], ["cq"], kernel_shape=[3, 2],
                         strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=1, channels_last=1, domain=MS),
        helper.make_node("Reshape", ["cq", "flat"], ["fq"]),
        helper.make_node("QLinearAveragePool", ["fq", *q["p"], *q["k"]], ["lq"], kernel_shape=[3], strides=[2],
                         pads=[1, 1], ceil_mode=1, domain=MS),
        helper.make_node("DequantizeLinear", ["lq", *q["k"]], ["y"]),
    ]
    inits["flat"] = np.array([1, 4, -1], np.int64)
    x = r.standard_normal((1, 2, 5, 6)).astype(np.float32)
    model = _model(nodes, [_vi("x", F, x.shape)], [_vi("y", F, [1, 4, 8])], inits, 13, domains=(MS,))
    return model, {"x": x}, []


def int8_dynamic():
    """quantize_dynamic's form: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul
    -> Add, which the build fuses into com.microsoft DynamicQuantizeMatMul, beside a
    MatMulInteger of the same quantised input that stays (its product is only cast)
    and a ConvInteger of it with a weight zero point."""
    r = _rng(17)
    inits = {"w": r.integers(-60, 60, (8, 6)).astype(np.int8), "w_s": np.array(0.02, np.float32),
             "w_z": np.array(0, np.int8), "b": r.standard_normal(6).astype(np.float32),
             "w2": r.integers(0, 255, (8, 3)).astype(np.uint8), "w2_z": np.array(7, np.uint8),
             "cw": r.integers(-60, 60, (3, 2, 2, 2)).astype(np.int8), "cw_z": np.array(1, np.int8)}
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("Mul", ["xs", "w_s"], ["s"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_z"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["accf", "s"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["y"]),
        helper.make_node("MatMulInteger", ["xq", "w2", "xz", "w2_z"], ["acc2"]),
        helper.make_node("Cast", ["acc2"], ["y2"], to=F),
        helper.make_node("Reshape", ["xq", "img"], ["xi"]),
        helper.make_node("ConvInteger", ["xi", "cw", "xz", "cw_z"], ["ci"], pads=[0, 1, 1, 0]),
        helper.make_node("Cast", ["ci"], ["y3"], to=F),
    ]
    inits["img"] = np.array([1, 2, 5, 4], np.int64)
    x = r.standard_normal((5, 8)).astype(np.float32)
    outputs = [_vi("y", F, None), _vi("y2", F, None), _vi("y3", F, None)]
    return _model(nodes, [_vi("x", F, x.shape)], outputs, inits, 13), {"x": x}, []


SEEDS = [
    Seed("transformer", {"MatMul", "Transpose", "Mul", "Softmax", "Add", "LayerNormalization", "Gelu", "Erf",
                         "Pow", "ReduceMean", "ReduceSum", "ReduceMax", "Reshape"}, transformer,
         fused_ops={"ai.minibuild.FusedMatMul"}),  # the linear layers' MatMul + bias Add
    Seed("vision", {"Resize", "ConvTranspose", "PRelu", "Mish", "Sigmoid", "Mul"}, vision,
         fused_ops={"ai.minibuild.SiLU"}, fused_from={"Sigmoid", "Mul"}),
    Seed("typed", {"Gather", "Equal", "Unsqueeze", "Where", "Cast", "Expand"}, typed),
    Seed("typed_logic", {"Less", "Greater", "IsNaN", "Not", "And", "Or", "Cast", "GatherElements", "Add",
                         "GatherND", "Mul"}, typed_logic),
    Seed("int8_qdq", {"QuantizeLinear", "DequantizeLinear", "Add", "AveragePool", "MaxPool", "Sigmoid",
                      "LeakyRelu", "Concat", "GlobalAveragePool"}, int8_qdq,
         fused_ops={f"{MS}.QLinearAdd", f"{MS}.QLinearAveragePool", f"{MS}.QLinearSigmoid",
                    f"{MS}.QLinearLeakyRelu", f"{MS}.QLinearConcat", f"{MS}.QLinearGlobalAveragePool"},
         fused_from={"Add", "AveragePool", "Sigmoid", "LeakyRelu", "Concat", "GlobalAveragePool"}),
    Seed("int8_qoperator", {"QuantizeLinear", f"{MS}.QLinearConcat", "Transpose", "QLinearConv",
                            f"{MS}.QLinearAveragePool", f"{MS}.QLinearLeakyRelu", f"{MS}.QLinearMul",
                            "QLinearMatMul", "Reshape", f"{MS}.QGemm", "DequantizeLinear"}, int8_qoperator),
    Seed("int8_pools", {"QuantizeLinear", "DequantizeLinear", "AveragePool", "MaxPool", "Concat"}, int8_pools,
         fused_ops={f"{MS}.QLinearAveragePool", f"{MS}.QLinearConcat"}, fused_from={"AveragePool"}),
    Seed("int8_qop_pools", {"QuantizeLinear", "MaxPool", f"{MS}.QLinearAveragePool", f"{MS}.QLinearConcat",
                            "Reshape", "DequantizeLinear"}, int8_qop_pools),
    Seed("int8_dynamic", {"DynamicQuantizeLinear", "Mul", "MatMulInteger", "Cast", "Add", "Reshape", "ConvInteger"},
         int8_dynamic, fused_ops={f"{MS}.DynamicQuantizeMatMul"}, fused_from={"Mul", "Add"}),
]


def missing_ops(seed: Seed, registry) -> list[str]:
    have = {op if dom == "ai.onnx" else f"{dom}.{op}" for dom, op in registry.ops}
    return sorted((seed.ops | seed.fused_ops) - have)


def write_seeds(out: Path, registry=None) -> tuple[dict[str, Path], dict[str, str]]:
    """Converts every seed whose ops are registered into out/<name>.mrt. Returns
    (written: name -> path, skipped: name -> reason)."""
    from minibuild import registry as registry_mod
    from minibuild.testing import convert_model
    registry = registry or registry_mod.load()
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = {}, {}
    for seed in SEEDS:
        missing = missing_ops(seed, registry)
        if missing:
            skipped[seed.name] = "not in the registry yet: " + ", ".join(missing)
            continue
        model, feeds, constant = seed.build()
        data, runtime_inputs = convert_model(model, feeds, constant_inputs=constant, registry=registry)
        assert set(runtime_inputs) == set(feeds), (seed.name, runtime_inputs)
        path = out / f"{seed.name}.mrt"
        path.write_bytes(data)
        written[seed.name] = path
    return written, skipped


if __name__ == "__main__":
    done, skipped = write_seeds(Path(sys.argv[1]))
    for name, path in done.items():
        print(f"{name}: {path} ({path.stat().st_size} bytes)")
    for name, why in skipped.items():
        print(f"{name}: skipped, {why}")

"""The new kernels' ARM code paths (NEON through the vector extensions: vmath.h's exp,
erf and tanh, Softmax, LayerNormalization, Resize, the batched/packed sgemm behind
MatMul and ConvTranspose, the activation one-pass loops) under qemu-user, against
onnxruntime. Each model is one block of a real network, on sizes that are not
multiples of the vector width so the tails run too:

- bert: a BERT encoder layer (batched MatMul with broadcasting, Softmax on the last
  and on a middle axis, LogSoftmax, LayerNormalization on one and two axes, Gelu
  exact and tanh, Erf, Pow, ReduceSum/Mean/Max, Add/Div/Transpose/Reshape);
- vision: a segmentation-decoder block (Conv, PRelu, Resize linear/nearest/cubic,
  Mish, ConvTranspose stride 2 and grouped, x*Sigmoid(x) fused to SiLU);
- gemm_edges: MatMul past the sgemm blocking sizes and with batch broadcasting,
  antialiased and align_corners Resize, a 1-D ConvTranspose;
- activations: Erf, Gelu, Mish, SiLU, Softmax over [-100, 100] in one long row, and
  Gelu / Erf accuracy against float64 (vmath.h's stated bounds);
- conv_epilogue: FusedConv / FusedConvAct's residual Add, clamps, LeakyRelu, SiLU,
  Sigmoid and HardSwish on the NEON GEMM tiles and the depthwise planes, and
  ScaledConv (a squeeze-excitation's Mul joined to the next conv);
- int8: the dynamic-quantisation kernels (DynamicQuantizeLinear, MatMulInteger and
  ConvInteger on qgemm's NEON tiles, Quantize/DequantizeLinear);
- typed: the non-float kernels (Gather, Where, Cast, Expand, comparisons, logic,
  IsNaN, int64/bool copies) that the registry holds when the test runs.

One mrt_run build per ABI (tests/test_android.py's runner: static musl, armv7 with
the armeabi-v7a flags) serves every model. An output matches when
max|minirt - ort| <= 1e-4 of its range; integer and bool outputs must be equal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref, prepare, registry as registry_mod
from minibuild.errors import UnsupportedOpsError

from test_android import build_runners, qemu_for, run_under_qemu

ort = pytest.importorskip("onnxruntime")

ARCHS = ["qemu-aarch64", "qemu-armv7"]
TOL = 1e-4
# Conversions: exact (NaN payloads aside).
EXACT = {"half_to_float", "float_to_half", "cast_back"}
RNG = np.random.default_rng(1234)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


class Graph:
    """A small onnx.helper graph builder: constants, nodes, outputs with the shapes
    and types onnxruntime computes (the build wants static shapes)."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, value, name=None) -> str:
        self.n += 1
        name = name or f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type, inputs, out=None, domain="", **attrs) -> str:
        self.n += 1
        out = out or f"{op_type.lower()}{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"n{self.n}_{op_type}", **attrs))
        return out

    def model(self, feeds: dict, outputs: list[str], opset: int) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                  for k, v in feeds.items()]
        # Output types and shapes as onnx infers them; onnxruntime checks them below.
        probe = helper.make_model(helper.make_graph(self.nodes, "probe", inputs, [], self.inits),
                                  opset_imports=[helper.make_opsetid("", opset)])
        probe.ir_version = 9
        known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(probe, strict_mode=True).graph.value_info}
        graph = helper.make_graph(self.nodes, "arm_kernels", inputs, [known[o] for o in outputs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        onnx.checker.check_model(model, full_check=True)
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        return model


# --------------------------------------------------------------------------- models

def bert_block():
    """One encoder layer, batch 2, 13 tokens, hidden 44 (4 heads of 11), FFN 76."""
    b, s, h, heads, ffn = 2, 13, 44, 4, 76
    dh = h // heads
    g = Graph()
    # Masked positions as transformers writes them: the most negative float.
    mask = np.where(RNG.random((b, 1, 1, s)) < 0.2, np.finfo(np.float32).min, 0).astype(np.float32)
    feeds = {"x": randn(b, s, h), "mask": mask}

    def dense(x, n_in, n_out):
        w, bias = g.const(randn(n_in, n_out, scale=n_in ** -0.5)), g.const(randn(n_out, scale=0.1))
        return g.op("Add", [g.op("MatMul", [x, w]), bias])

    heads_shape = g.const(np.array([b, s, heads, dh], np.int64))
    q = g.op("Transpose", [g.op("Reshape", [dense("x", h, h), heads_shape])], perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [g.op("Reshape", [dense("x", h, h), heads_shape])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [dense("x", h, h), heads_shape])], perm=[0, 2, 1, 3])
    scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, kt]), g.const(np.float32(np.sqrt(dh)))]), "mask"])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const(np.array([b, s, h], np.int64))])
    attn = dense(ctx, h, h)
    ln1 = g.op("LayerNormalization", [g.op("Add", ["x", attn]), g.const(randn(h, scale=0.1) + 1),
                                      g.const(randn(h, scale=0.1))], axis=-1, epsilon=1e-12)
    inter = dense(ln1, h, ffn)
    gelu = g.op("Gelu", [inter])
    out = g.op("Add", [ln1, dense(gelu, ffn, h)])
    hidden = g.op("LayerNormalization", [out, g.const(randn(h) + 1), g.const(randn(h))], out="hidden",
                  axis=-1, epsilon=1e-12)
    # Around the layer: the reductions, axes and paths a pooler / loss / probe uses.
    pooled = g.op("ReduceMean", [hidden, g.const(np.array([1], np.int64))], out="pooled", keepdims=0)
    sq = g.op("ReduceSum", [g.op("Pow", [ln1, g.const(np.float32(2))]), g.const(np.array([2], np.int64))],
              out="sumsq", keepdims=1)
    cube = g.op("Pow", [inter, g.const(np.array(3, np.int64))], out="cube")
    tanh_max = g.op("ReduceMax", [g.op("Gelu", [inter], approximate="tanh"), g.const(np.array([1], np.int64))],
                    out="gelu_tanh_max", keepdims=0)
    erf = g.op("Erf", [g.op("Mul", [inter, g.const(np.float32(0.37))])], out="erf")
    col = g.op("Softmax", [scores], out="softmax_axis1", axis=1)
    logp = g.op("LogSoftmax", [attn], out="log_softmax", axis=-1)
    ln2d = g.op("LayerNormalization", [out, g.const(randn(s, h) + 1)], out="layernorm_2d", axis=1, epsilon=1e-5)
    mean_all = g.op("ReduceMean", [erf, g.const(np.array([1, 2], np.int64))], out="erf_mean", keepdims=1)
    outputs = [hidden, pooled, sq, cube, tanh_max, erf, col, logp, ln2d, mean_all]
    return g.model(feeds, outputs, opset=20), feeds


def vision_block():
    """A decoder stage: Conv + PRelu, 2x linear upsampling, Mish, a stride-2
    ConvTranspose, SiLU, nearest and cubic resizes, a grouped ConvTranspose."""
    g = Graph()
    feeds = {"x": randn(1, 5, 9, 11)}
    c = g.op("Conv", ["x", g.const(randn(12, 5, 3, 3, scale=0.25)), g.const(randn(12, scale=0.1))],
             kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    p = g.op("PRelu", [c, g.const((RNG.random((12, 1, 1)) * 0.5).astype(np.float32))])
    roi = g.const(np.array([], np.float32))
    up = g.op("Resize", [p, roi, g.const(np.array([1, 1, 2, 2], np.float32))], mode="linear",
              coordinate_transformation_mode="half_pixel")
    m = g.op("Mish", [up])
    ct = g.op("ConvTranspose", [m, g.const(randn(12, 7, 3, 3, scale=0.2)), g.const(randn(7, scale=0.1))],
              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    silu = g.op("Mul", [ct, g.op("Sigmoid", [ct])], out="silu")
    near = g.op("Resize", [silu, roi, "", g.const(np.array([1, 7, 17, 23], np.int64))], out="nearest",
                mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric")
    cubic = g.op("Resize", [p, roi, g.const(np.array([1, 1, 1.5, 1.75], np.float32))], out="cubic",
                 mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")
    grouped = g.op("ConvTranspose", [p, g.const(randn(12, 3, 2, 3, scale=0.3))], out="grouped",
                   group=4, kernel_shape=[2, 3], strides=[2, 1], dilations=[1, 2])
    sl = g.op("PRelu", [grouped, g.const(np.float32(0.1))], out="prelu_scalar")
    return g.model(feeds, [near, cubic, silu, sl], opset=19), feeds


def conv_epilogue_block():
    """FusedConv / FusedConvAct epilogues on the NEON tiles (8 x 8 on aarch64, 4 x 8
    on armv7, ragged rows and columns) and depthwise planes: a residual Add + Relu
    after a pointwise and a 3x3 conv, an Add alone after a grouped conv, HardSwish
    after a depthwise one, x*Sigmoid(x) (SiLU), Sigmoid and LeakyRelu; a
    squeeze-excitation gate's Mul in the next conv (ScaledConv)."""
    g = Graph()
    feeds = {"x": randn(1, 12, 9, 11)}
    w = lambda *s: g.const(randn(*s, scale=float(np.prod(s[1:])) ** -0.5))
    b = lambda n: g.const(randn(n, scale=0.1))
    c1 = g.op("Conv", ["x", w(12, 12, 1, 1), b(12)])
    r1 = g.op("Relu", [g.op("Add", [c1, "x"])])
    c2 = g.op("Conv", [r1, w(12, 12, 3, 3), b(12)], pads=[1, 1, 1, 1])
    r2 = g.op("Relu", [g.op("Add", [r1, c2])], out="res_relu")
    dw = g.op("HardSwish", [g.op("Conv", [r2, w(12, 1, 3, 3), b(12)], group=12, pads=[1, 1, 1, 1])],
              out="dw_hardswish")
    gr = g.op("Add", [g.op("Conv", [dw, w(12, 4, 3, 3)], group=3, pads=[1, 1, 1, 1]), r2], out="grouped_add")
    e = g.op("Conv", [gr, w(20, 12, 1, 1), b(20)])
    silu = g.op("Mul", [e, g.op("Sigmoid", [e])], out="silu")
    sig = g.op("Sigmoid", [g.op("Conv", [silu, w(7, 20, 3, 3), b(7)], strides=[2, 2])], out="sigmoid")
    leaky = g.op("LeakyRelu", [g.op("Conv", [silu, w(9, 20, 1, 1)])], out="leaky", alpha=0.2)
    gate = g.op("Sigmoid", [g.op("Conv", [g.op("Relu", [g.op("Conv", [g.op("GlobalAveragePool", [silu]),
                                                                         w(4, 20, 1, 1)])]), w(20, 4, 1, 1)])])
    scaled = g.op("Conv", [g.op("Mul", [silu, gate]), w(6, 20, 1, 1), b(6)], out="scaled")
    return g.model(feeds, [r2, dw, gr, sig, leaky, scaled], opset=17), feeds


def depthwise_block():
    """Depthwise convolutions on NEON's 4-channel blocks (conv_dw.h) and, with the
    weights fed at run time, on the plane path: channel counts 1, 3 (VL - 1), 7
    (VL + 3) and 12 (3 VL); 3x3 / 5x5 / 7x7, strides 1 to 3, asymmetric pads,
    dilation 2, a 1-D one, batch 2; Relu6, SiLU, HardSwish, Sigmoid and a
    residual Add + Relu6 fused into them."""
    g = Graph()
    feeds = {"x1": randn(2, 1, 9, 10), "x3": randn(2, 3, 13, 11), "x7": randn(2, 7, 14, 15),
             "x12": randn(2, 12, 7, 7), "seq": randn(2, 7, 29), "wrt": randn(7, 1, 3, 3, scale=0.3)}
    w = lambda c, *k: g.const(randn(c, 1, *k, scale=float(np.prod(k)) ** -0.5))
    b = lambda n: g.const(randn(n, scale=0.1))
    lo, hi = g.const(np.float32(0)), g.const(np.float32(6))
    outs = []
    c = g.op("Conv", ["x1", w(1, 3, 3), b(1)], group=1, pads=[1, 1, 1, 1])
    outs.append(g.op("Clip", [c, lo, hi], out="dw1_relu6"))
    c = g.op("Conv", ["x3", w(3, 5, 5), b(3)], group=3, pads=[2, 1, 0, 2], strides=[2, 2])
    outs.append(g.op("Mul", [c, g.op("Sigmoid", [c])], out="dw3_5x5_s2_silu"))
    c = g.op("Conv", ["x7", w(7, 3, 3), b(7)], group=7, pads=[2, 2, 2, 2], dilations=[2, 2])
    outs.append(g.op("HardSwish", [c], out="dw7_dil2_hardswish"))
    c = g.op("Conv", ["x7", w(7, 7, 7)], group=7, pads=[3, 2, 1, 3], strides=[3, 3])
    outs.append(g.op("Sigmoid", [c], out="dw7_7x7_s3_sigmoid"))
    c = g.op("Conv", ["x12", w(12, 3, 3), b(12)], group=12, pads=[1, 1, 1, 1])
    outs.append(g.op("Clip", [g.op("Add", [c, "x12"]), lo, hi], out="dw12_residual_relu6"))
    c = g.op("Conv", ["x12", w(12, 5, 5), b(12)], group=12, pads=[2, 2, 2, 2])
    outs.append(g.op("Mul", [c, g.op("Sigmoid", [c])], out="dw12_5x5_silu"))
    c = g.op("Conv", ["x7", w(7, 3, 3), b(7)], group=7, pads=[1, 1, 1, 1], strides=[2, 2])
    outs.append(g.op("Clip", [c, lo, hi], out="dw7_s2_relu6"))
    outs.append(g.op("Conv", ["seq", g.const(randn(7, 1, 5, scale=0.4)), b(7)], out="dw_1d",
                     group=7, pads=[2, 1], strides=[2]))
    # Weights fed at run time: the plane path.
    outs.append(g.op("Conv", ["x7", "wrt", b(7)], out="dw7_plane", group=7, pads=[1, 1, 1, 1]))
    return g.model(feeds, outs, opset=17), feeds


def gemm_edges():
    """The sgemm behind MatMul and ConvTranspose past its blocking sizes (K > kc = 128,
    N > nc = 1024 on armv7), with row/column tails, and batch broadcasting on both
    sides; Resize's antialiased downsampling and align_corners; a 1-D ConvTranspose."""
    g = Graph()
    feeds = {"a": randn(2, 5, 300), "b": randn(2, 1, 7, 33), "img": randn(1, 3, 21, 26), "seq": randn(2, 6, 29)}
    big = g.op("MatMul", ["a", g.const(randn(300, 1030, scale=0.05))], out="matmul_blocked")
    bcast = g.op("MatMul", ["b", g.const(randn(3, 33, 9))], out="matmul_broadcast")   # [2,3,7,9]
    roi = g.const(np.array([], np.float32))
    aa = g.op("Resize", ["img", roi, g.const(np.array([1, 1, 0.5, 0.4], np.float32))], out="resize_antialias",
              mode="linear", antialias=1)
    ac = g.op("Resize", ["img", roi, "", g.const(np.array([1, 3, 31, 40], np.int64))], out="resize_align_corners",
              mode="linear", coordinate_transformation_mode="align_corners")
    ct1 = g.op("ConvTranspose", ["seq", g.const(randn(6, 4, 5, scale=0.3)), g.const(randn(4))], out="convtranspose_1d",
               kernel_shape=[5], strides=[3], pads=[2, 1])
    return g.model(feeds, [big, bcast, aa, ac, ct1], opset=19), feeds


def activations():
    """The vector transcendental paths (vmath.h) over the whole range networks feed
    them, one long row (not a multiple of the vector width), extremes included."""
    g = Graph()
    x = np.concatenate([np.linspace(-12, 12, 24001), [-100, -88.5, -30, 30, 88.5, 100]]).astype(np.float32)
    feeds = {"x": x[None, :]}
    outs = [g.op("Erf", ["x"], out="erf"), g.op("Gelu", ["x"], out="gelu"),
            g.op("Gelu", ["x"], out="gelu_tanh", approximate="tanh"), g.op("Mish", ["x"], out="mish"),
            g.op("Mul", ["x", g.op("Sigmoid", ["x"])], out="silu"),
            g.op("Softmax", [g.op("Mul", ["x", g.const(np.float32(0.5))])], out="softmax", axis=-1),
            g.op("LogSoftmax", ["x"], out="log_softmax", axis=-1)]
    return g.model(feeds, outs, opset=20), feeds


def _typed_feeds() -> dict:
    x = randn(3, 17)
    x[0, :4] = [0.0, -0.0, 0.1, -0.1]                      # exact zeros: Equal, Sqrt(-0)
    # Every float16 bit pattern (subnormals: armv7's NEON flushes float32 subnormals,
    # which the portable half conversion's multiply produces on the way).
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    # float32 -> float16: ties to even at every exponent, subnormal halves, overflow.
    half = np.arange(-24, 16, dtype=np.float32)
    f = np.concatenate([2.0 ** half, 2.0 ** half * (1 + 2.0 ** -11), 2.0 ** half * (1 + 3 * 2.0 ** -11),
                        [65504, 65519.99, 65520, 1e9, 2.0 ** -25, 2.0 ** -26, 1e-30, 0.0]]).astype(np.float32)
    return {"x": x, "h": h, "f": np.concatenate([f, -f]).astype(np.float32)}


# Typed parts: (ops, inputs, builder). A part joins the typed model only when the
# build serves all of it (the typed kernels arrive one by one).
def _typed_parts():
    def gather(g):
        idx = g.const(np.array([[2, 0], [1, 2]], np.int64))
        return [g.op("Gather", ["x", idx], out="gather", axis=0),
                g.op("Gather", ["x", g.const(np.array([16, -1, 3], np.int32))], out="gather_neg", axis=1)]

    def where(g):
        cond = g.op("Greater", ["x", g.const(np.float32(0.25))])
        return [g.op("Where", [cond, "x", g.op("Neg", ["x"])], out="where")]

    def cast(g):
        i = g.op("Cast", [g.op("Mul", ["x", g.const(np.float32(7))])], out="cast_int64", to=TensorProto.INT64)
        return [i, g.op("Cast", [i], out="cast_back", to=TensorProto.FLOAT),
                g.op("Cast", [g.op("Mul", ["x", g.const(np.float32(40))])], out="cast_int8", to=TensorProto.INT8)]

    def expand(g):
        col = g.op("Slice", ["x", g.const(np.array([0], np.int64)), g.const(np.array([1], np.int64)),
                             g.const(np.array([1], np.int64))])
        return [g.op("Expand", [col, g.const(np.array([2, 3, 9], np.int64))], out="expand")]

    def compare(g):
        lo, hi = g.const(np.float32(-0.5)), g.const(np.float32(0.5))
        inside = g.op("And", [g.op("Greater", ["x", lo]), g.op("Less", ["x", hi])])
        zero = g.op("Equal", [g.op("Cast", ["x"], to=TensorProto.INT64), g.const(np.array(0, np.int64))])
        return [g.op("Or", [g.op("Not", [inside]), zero], out="logic")]

    def isnan(g):
        return [g.op("IsNaN", [g.op("Sqrt", ["x"])], out="isnan")]

    def views(g):
        i = g.op("Cast", [g.op("Mul", ["x", g.const(np.float32(3))])], to=TensorProto.INT64)
        r = g.op("Reshape", [i, g.const(np.array([-1], np.int64))])
        b = g.op("Greater", ["x", g.const(np.float32(0))])
        return [g.op("Concat", [r, r], out="int64_concat", axis=0),
                g.op("Unsqueeze", [b, g.const(np.array([0], np.int64))], out="bool_unsqueeze")]

    def transpose(g):
        i = g.op("Cast", [g.op("Mul", ["x", g.const(np.float32(3))])], to=TensorProto.INT64)
        return [g.op("Transpose", [i], out="int64_transpose", perm=[1, 0]),
                g.op("Transpose", [g.op("Less", ["x", g.const(np.float32(0))])], out="bool_transpose", perm=[1, 0])]

    def float16(g):
        return [g.op("Cast", ["h"], out="half_to_float", to=TensorProto.FLOAT),
                g.op("Cast", ["f"], out="float_to_half", to=TensorProto.FLOAT16),
                g.op("IsNaN", ["h"], out="half_isnan")]

    return [({"Gather"}, "x", gather), ({"Greater", "Where", "Neg"}, "x", where), ({"Cast"}, "x", cast),
            ({"Slice", "Expand"}, "x", expand),
            ({"Greater", "Less", "Equal", "And", "Or", "Not", "Cast"}, "x", compare),
            ({"Sqrt", "IsNaN"}, "x", isnan), ({"Cast", "Reshape", "Concat", "Greater", "Unsqueeze"}, "x", views),
            ({"Cast", "Transpose", "Less"}, "x", transpose), ({"Cast", "IsNaN"}, "hf", float16)]


def _serves(feeds: dict, build_part) -> bool:
    """Whether the build serves this part: its ops and their type signatures in the
    registry (an entry may not cover every type yet)."""
    g = Graph()
    try:
        model = g.model(feeds, build_part(g), opset=17)
        prepare.prepare(model, Path("part.onnx"), REGISTRY, input_shapes={k: v.shape for k, v in feeds.items()})
    except UnsupportedOpsError:
        return False
    return True


def typed_block():
    allf = _typed_feeds()
    registered = {op for (domain, op) in REGISTRY.ops if domain == "ai.onnx"}
    g, outputs, used, inputs = Graph(), [], [], set()
    for ops, names, part in _typed_parts():
        feeds = {k: allf[k] for k in names}
        if ops <= registered and _serves(feeds, part):
            outputs += part(g)
            used.append(part.__name__)
            inputs |= set(names)
    if not outputs:
        return None, None, used
    feeds = {k: v for k, v in allf.items() if k in inputs}
    return g.model(feeds, outputs, opset=17), feeds, used


def int8_block():
    """The dynamic-quantisation path (qgemm's NEON micro-kernels and edge tiles):
    DynamicQuantizeLinear -> MatMulInteger (int8 weights, per-column zero points, K
    odd, M and N past the tiles) -> Cast -> Mul, uint8 x uint8 with B at run time,
    ConvInteger (padded, grouped), QuantizeLinear per axis and DequantizeLinear."""
    g = Graph()
    q = lambda shape, dt: RNG.integers(np.iinfo(dt).min, np.iinfo(dt).max, size=shape, endpoint=True).astype(dt)
    feeds = {"x": randn(2, 13, 45), "au": q((19, 37), np.uint8), "bu": q((37, 21), np.uint8),
             "img": q((1, 6, 11, 9), np.uint8)}
    xq = g.op("DynamicQuantizeLinear", ["x"], out="dq_y")
    g.nodes[-1].output.extend(["dq_scale", "dq_zp"])
    mmi = g.op("MatMulInteger", [xq, g.const(q((45, 27), np.int8)), "dq_zp", g.const(q((27,), np.int8))],
               out="matmulinteger_s8")
    f = g.op("Mul", [g.op("Cast", [mmi], to=TensorProto.FLOAT), "dq_scale"], out="rescaled")
    uu = g.op("MatMulInteger", ["au", "bu", g.const(np.uint8(200)), g.const(np.uint8(3))], out="matmulinteger_u8u8")
    ci = g.op("ConvInteger", ["img", g.const(q((10, 3, 3, 3), np.uint8)), g.const(np.uint8(17)), g.const(np.uint8(140))],
              out="convinteger", pads=[1, 1, 1, 1], group=2)
    ql = g.op("QuantizeLinear", ["x", g.const(np.float32([0.02, 0.05] * 22 + [0.01])),
                                 g.const(np.int8([3, -4] * 22 + [0]))], out="quantize_axis", axis=2)
    dl = g.op("DequantizeLinear", [ql, g.const(np.float32(0.03)), g.const(np.int8(-2))], out="dequantize")
    return g.model(feeds, ["dq_y", "dq_scale", "dq_zp", mmi, f, uu, ci, ql, dl], opset=13), feeds


REGISTRY = registry_mod.load()


# --------------------------------------------------------------------------- build once

@pytest.fixture(scope="module")
def arm_build(tmp_path_factory):
    """The three models' manifest, one mrt_run per ARM ABI."""
    for arch in ARCHS:
        qemu_for(arch)
    root = tmp_path_factory.mktemp("arm-kernels")
    models = root / "models"
    models.mkdir()
    feeds, typed_parts = {}, []
    for name, make in (("bert", bert_block), ("vision", vision_block), ("gemm_edges", gemm_edges),
                       ("activations", activations), ("int8", int8_block), ("conv_epilogue", conv_epilogue_block),
                       ("depthwise", depthwise_block)):
        model, feeds[name] = make()
        onnx.save(model, models / f"{name}.onnx")
    model, f, typed_parts = typed_block()
    if model is not None:
        feeds["typed"] = f
        onnx.save(model, models / "typed.onnx")
    mrt, runners, res = build_runners(models, root / "out", keys=ARCHS)
    return models, feeds, mrt, runners, res, typed_parts


def _compare(raw: bytes, ref: np.ndarray, name: str) -> float:
    got = np.frombuffer(raw, dtype=ref.dtype).reshape(ref.shape)
    if ref.dtype.kind in "biu" or name.split()[-1] in EXACT:
        same = (got == ref) | (np.isnan(got) & np.isnan(ref)) if ref.dtype.kind == "f" else got == ref
        bad = np.flatnonzero(~same)
        assert not bad.size, (f"{name}: {bad.size} of {ref.size} differ, first at {bad[:5]}: "
                              f"got {got.ravel()[bad[:5]]}, want {ref.ravel()[bad[:5]]}")
        return 0.0
    span = float(max(ref.max() - ref.min(), np.abs(ref).max())) if ref.size else 0.0
    err = float(np.abs(got.astype(np.float64) - ref).max()) if ref.size else 0.0
    assert np.isfinite(got).all() == np.isfinite(ref).all(), f"{name}: non-finite values"
    assert err <= TOL * max(span, 1e-6), f"{name}: max error {err:.3g} > {TOL} * range {span:.3g}"
    return err


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("model", ["bert", "vision", "gemm_edges", "activations", "typed", "int8", "conv_epilogue",
                                   "depthwise"])
def test_new_kernels_under_qemu_match_onnxruntime(arm_build, arch, model, tmp_path):
    models, feeds, mrt, runners, res, typed_parts = arm_build
    if model not in feeds:
        pytest.skip("the registry serves none of the typed kernels yet")
    path = models / f"{model}.onnx"
    sess = ortref.reference_session(path)  # exact int8 on hosts where onnxruntime's u8s8 GEMM saturates
    refs = sess.run(None, feeds[model])
    names = [o.name for o in sess.get_outputs()]
    got = run_under_qemu(arch, runners[arch], mrt[model], [feeds[model][i.name] for i in sess.get_inputs()], tmp_path)
    assert len(got) == len(refs)
    errs = {n: _compare(raw, ref, f"{arch} {model} {n}") for raw, ref, n in zip(got, refs, names)}
    extra = f" (parts: {', '.join(typed_parts)})" if model == "typed" else ""
    print(f"\n{arch} {model}{extra}: max abs error " + ", ".join(f"{n} {e:.2g}" for n, e in errs.items()))
    if model == "activations":
        # vmath.h's accuracy claims hold on ARM too: Gelu within 2e-6 relative
        # wherever |gelu| >= 1e-6, Erf within 3e-7 of float64 (checks the FMA
        # contraction and armv7's flush-to-zero NEON, not only "close to ort").
        from math import erf
        x = feeds[model]["x"].ravel().astype(np.float64)
        out = dict(zip(names, got))
        want_erf = np.array([erf(v) for v in x])
        want_gelu = 0.5 * x * (1 + np.array([erf(v / np.sqrt(2)) for v in x]))
        got_erf = np.frombuffer(out["erf"], np.float32).astype(np.float64)
        got_gelu = np.frombuffer(out["gelu"], np.float32).astype(np.float64)
        keep = np.abs(want_gelu) >= 1e-6
        assert np.max(np.abs(got_gelu[keep] - want_gelu[keep]) / np.abs(want_gelu[keep])) < 2e-6
        nz = want_erf != 0
        assert np.max(np.abs(got_erf[nz] - want_erf[nz]) / np.abs(want_erf[nz])) < 3e-7


def test_models_reach_the_kernels_they_are_for(arm_build):
    """The optimised graphs still hold the kernels under test (a rewrite that folded
    them away would make the qemu comparison vacuous)."""
    _, _, _, _, res, _ = arm_build
    ops = {(e.domain, e.op) for e in res.manifest.entries}
    want = {("ai.onnx", o) for o in ("MatMul", "Softmax", "LogSoftmax", "LayerNormalization", "Gelu", "Erf", "Pow",
                                     "ReduceSum", "ReduceMean", "ReduceMax", "Resize", "ConvTranspose", "PRelu",
                                     "Mish", "Add", "Div", "Transpose")} | {("ai.minibuild", "SiLU")}
    want |= {("ai.minibuild", "FusedConv"), ("ai.minibuild", "FusedConvAct"), ("ai.minibuild", "FusedMatMul"),
             ("ai.minibuild", "ScaledConv")}
    assert want <= ops, want - ops


def test_armv7_runner_kernels_are_the_armeabi_v7a_build(arm_build):
    """The armv7 objects the qemu run checks are compiled as armeabi-v7a's are (ARMv7-A,
    Thumb-2, NEON, softfp): otherwise the NEON paths would go untested. (The linked
    executable's attributes are lld's pick of one input, so the objects are read.)"""
    from elftools.elf.elffile import ELFFile
    _, _, _, runners, _, _ = arm_build
    objs = sorted((runners["qemu-armv7"].parent.parent / "obj" / "kernels").glob("*.o"))
    assert len(objs) > 20
    for o in objs:
        with open(o, "rb") as f:
            elf = ELFFile(f)
            attrs = {a.tag: a.value for sub in elf.get_section_by_name(".ARM.attributes").iter_subsections()
                     for ss in sub.iter_subsubsections() for a in ss.iter_attributes()}
            assert (attrs["TAG_CPU_ARCH"], attrs["TAG_THUMB_ISA_USE"], attrs.get("TAG_ADVANCED_SIMD_ARCH")) == \
                (10, 2, 1), o.name
            assert attrs.get("TAG_ABI_VFP_ARGS", 0) == 0 and elf.header.e_flags & 0x200, o.name  # softfp

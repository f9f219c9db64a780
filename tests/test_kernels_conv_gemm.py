"""Focused checks of the float32 GEMM-based kernels (Gemm, FusedGemm, MatMul, Conv,
FusedConv) against onnxruntime, beyond the ONNX conformance node tests: sizes that
are not multiples of the micro-kernel tile or of the k block, transposes, every
broadcast shape of Gemm's C, constant (packed at prepare) and runtime weights,
grouped / depthwise / dilated / strided / padded / auto_pad convolutions in 1-D,
2-D and 3-D, and Relu / Clip fused by the optimiser. Each case is a small model
run through the whole pipeline (optimise, convert, minirt)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import activation_nodes, with_output_shapes

from minibuild import toolchain

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(4321)
TOL = dict(rtol=1e-4, atol=1e-4)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model_of(nodes, feeds, consts, opset=17):
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return with_output_shapes(model)


def with_activation(op, inputs, activation, **attrs):
    """`op` writing y, or `op` followed by Relu / Clip (which the optimiser fuses
    into FusedConv / FusedGemm)."""
    if activation is None:
        return [helper.make_node(op, inputs, ["y"], **attrs)], {}
    main = helper.make_node(op, inputs, ["t"], **attrs)
    if activation == "Relu":
        return [main, helper.make_node("Relu", ["t"], ["y"])], {}
    lo, hi = activation
    return [main, helper.make_node("Clip", ["t", "clip_lo", "clip_hi"], ["y"])], {
        "clip_lo": np.float32(lo), "clip_hi": np.float32(hi)}


def check(model, feeds, tol=TOL):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)


# --- Gemm ------------------------------------------------------------------------------

GEMM_SIZES = [(1, 1, 1), (1, 1000, 300), (5, 7, 3), (6, 16, 256), (7, 17, 257), (13, 33, 600), (130, 70, 30),
              (17, 50, 600),  # N = 48 + 2: the two-column edge tile over three k blocks
              (24, 49, 600), (16, 97, 300),  # N = 48 + 1, 96 + 1: the 8 x 48 + 1 tile (whole row tiles)
              (16, 52, 300), (24, 196, 600)]  # N = 48 + 4, 4 x 48 + 4: the 8 x 48 + 4 tile


@pytest.mark.parametrize("m,n,k", GEMM_SIZES)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("b_const", [True, False])
def test_gemm_sizes_transposes(m, n, k, trans_a, trans_b, b_const):
    a = randn(k, m) if trans_a else randn(m, k)
    b = randn(n, k) if trans_b else randn(k, n)
    c = randn(n)
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    consts = {"c": c, **({"b": b} if b_const else {})}
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=0.75)]
    check(model_of(nodes, feeds, consts), feeds)


@pytest.mark.parametrize("c_shape", [None, (), (1,), (9,), (1, 9), (5, 1), (5, 9), (1, 1)])
@pytest.mark.parametrize("beta", [1.0, 0.5])
@pytest.mark.parametrize("c_const", [True, False])
def test_gemm_c_broadcast(c_shape, beta, c_const):
    a, b = randn(5, 11), randn(11, 9)
    feeds, consts, inputs = {"a": a}, {"b": b}, ["a", "b"]
    if c_shape is not None:
        (consts if c_const else feeds)["c"] = randn(*c_shape)
        inputs.append("c")
    nodes = [helper.make_node("Gemm", inputs, ["y"], beta=beta, alpha=1.5)]
    check(model_of(nodes, feeds, consts), feeds)


@pytest.mark.parametrize("activation", ["Relu", (-0.5, 0.75), (0.0, 6.0)])
@pytest.mark.parametrize("m,n,k", [(1, 40, 64), (9, 21, 40), (33, 70, 300)])
def test_fused_gemm(activation, m, n, k):
    feeds = {"a": randn(m, k)}
    nodes, extra = with_activation("Gemm", ["a", "b", "c"], activation, transB=1)
    check(model_of(nodes, feeds, {"b": randn(n, k), "c": randn(n), **extra}), feeds)


# --- MatMul ----------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3,), (3,)),                 # 1-D x 1-D -> scalar
    ((4,), (4, 5)),               # 1-D A
    ((2, 3, 4), (4,)),            # 1-D B
    ((5, 7), (7, 9)),
    ((2, 3, 5, 7), (7, 9)),       # batched A, one B: folds into one tall GEMM
    ((2, 1, 5, 7), (3, 7, 9)),    # both broadcast
    ((1, 5, 7), (4, 7, 9)),
    ((4, 5, 7), (1, 7, 9)),
    ((3, 50, 70), (3, 70, 33)),
    ((2, 3), (5, 3, 4)),
    ((6, 1, 2, 3), (5, 3, 4)),
    ((1, 300), (300, 17)),
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul(a_shape, b_shape, b_const):
    a, b = randn(*a_shape), randn(*b_shape)
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    check(model_of(nodes, feeds, {"b": b} if b_const else {}), feeds)


# --- Conv ------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, attributes)
    ((1, 3, 10, 12), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 4, 9, 7), (6, 2, 3, 3), dict(group=2, strides=[2, 2])),                   # grouped, strided
    ((1, 16, 13, 17), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),           # depthwise 3x3
    ((1, 24, 16, 16), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 8, 11, 40), (8, 1, 5, 5), dict(group=8, pads=[2, 1, 0, 2])),              # depthwise 5x5, asym pads
    ((1, 8, 12, 12), (8, 1, 3, 3), dict(group=8, pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((1, 6, 5, 5), (6, 1, 7, 7), dict(group=6, pads=[3, 3, 3, 3])),                # kernel wider than input
    ((1, 6, 8, 8), (12, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),               # depth multiplier 2
    ((1, 64, 9, 9), (70, 64, 1, 1), {}),                                          # pointwise -> GEMM
    ((1, 300, 7, 7), (129, 300, 1, 1), {}),                                       # pointwise, k > k block
    ((1, 8, 15, 15), (8, 8, 1, 1), dict(strides=[2, 2])),                         # strided 1x1 -> im2col
    ((1, 8, 6, 6), (4, 2, 1, 1), dict(group=4)),                                  # grouped pointwise
    ((1, 3, 33, 35), (16, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),     # stem-like
    ((1, 5, 10, 11), (7, 5, 3, 2), dict(dilations=[2, 3], pads=[1, 0, 2, 3])),
    ((1, 4, 9, 9), (6, 4, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 4, 10, 9), (6, 4, 4, 4), dict(auto_pad="SAME_LOWER", strides=[3, 2])),
    ((1, 4, 10, 9), (6, 4, 4, 2), dict(auto_pad="SAME_UPPER")),
    ((1, 4, 10, 9), (6, 4, 3, 3), dict(auto_pad="VALID", strides=[2, 1])),
    ((1, 4, 6, 6), (4, 4, 3, 3), dict(kernel_shape=[3, 3])),
    ((2, 6, 19), (4, 3, 3), dict(group=2, pads=[1, 2], dilations=[2])),          # 1-D
    ((1, 3, 50), (8, 3, 5), dict(strides=[3], auto_pad="SAME_UPPER")),          # 1-D
    ((1, 8, 40), (8, 1, 3), dict(group=8, pads=[1, 1])),                        # 1-D depthwise
    ((1, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),         # 3-D
    ((2, 4, 4, 5, 6), (6, 2, 2, 3, 1), dict(group=2, strides=[2, 1, 2], dilations=[1, 2, 1])),
    ((1, 4, 3, 6, 7), (4, 1, 1, 3, 3), dict(group=4, pads=[0, 1, 1, 0, 1, 1])),  # 3-D depthwise-shaped
    ((1, 2, 9, 9), (3, 2, 3, 3), dict(strides=[4, 4], pads=[1, 1, 0, 0])),      # trailing input never read
    ((1, 2, 4, 1), (3, 2, 1, 1), dict(strides=[1, 5], pads=[0, 3, 0, 0])),      # a column only of padding
    # depthwise stride 2 with an even left pad and rows of 45 / 34 (two 32-float steps), and a
    # narrow stride-1 plane with a 5x5 kernel (the AVX-512 padded copies)
    ((1, 8, 37, 45), (8, 1, 3, 3), dict(group=8, pads=[0, 2, 1, 0], strides=[2, 2])),
    ((1, 8, 20, 34), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 8, 9, 14), (8, 1, 5, 5), dict(group=8, pads=[2, 2, 2, 2])),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv(x_shape, w_shape, attrs, bias):
    feeds = {"x": randn(*x_shape)}
    consts = {"w": randn(*w_shape)}
    inputs = ["x", "w"]
    if bias:
        consts["b"] = randn(w_shape[0])
        inputs.append("b")
    check(model_of([helper.make_node("Conv", inputs, ["y"], **attrs)], feeds, consts), feeds)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [CONV_CASES[i] for i in (0, 1, 2, 8, 13, 19, 22)])
def test_conv_runtime_weights(x_shape, w_shape, attrs):
    """W as a model input: nothing can be packed at prepare."""
    feeds = {"x": randn(*x_shape), "w": randn(*w_shape)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)]
    check(model_of(nodes, feeds, {"b": randn(w_shape[0])}), feeds)


@pytest.mark.parametrize("activation", ["Relu", (-0.25, 0.5), (0.0, 6.0)])
@pytest.mark.parametrize("x_shape,w_shape,attrs", [CONV_CASES[i] for i in (0, 2, 8, 14, 19, 22)])
def test_fused_conv(activation, x_shape, w_shape, attrs):
    feeds = {"x": randn(*x_shape)}
    nodes, extra = with_activation("Conv", ["x", "w", "b"], activation, **attrs)
    consts = {"w": randn(*w_shape), "b": randn(w_shape[0]), **extra}
    check(model_of(nodes, feeds, consts), feeds)


def test_conv_resnet_block_shapes():
    """A 3x3 and a 1x1 conv at ResNet sizes: many full tiles, several k blocks."""
    feeds = {"x": randn(1, 64, 28, 28)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t"], ["u"]),
             helper.make_node("Conv", ["u", "w2", "b2"], ["y"])]
    consts = {"w1": randn(64, 64, 3, 3) * 0.1, "b1": randn(64), "w2": randn(256, 64, 1, 1) * 0.1, "b2": randn(256)}
    check(model_of(nodes, feeds, consts), feeds)


# --- every x86_64 micro-kernel family on this machine ----------------------------------

def _cpu_flags() -> set:
    try:
        return set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split())
    except (OSError, StopIteration):
        return set()


def _cpu_has_avx2_fma() -> bool:
    return {"avx2", "fma"} <= _cpu_flags()


x86_only = pytest.mark.skipif(toolchain.host_abi() != "x86_64",
                              reason="MINIRT_MAX_CPU_ISA selects among x86_64 micro-kernels")

# Cases every capped micro-kernel family runs: GEMM sizes with edge rows and
# columns and several k blocks, then depthwise 3x3 (stride 1 and 2) and a
# 7x7 stride-2 stem through im2col, and pointwise ones at the projection
# shapes of MobileNetV2 (few output channels, wide images, N not a tile multiple).
CAP_GEMMS = [(7, 17, 257), (13, 33, 600), (130, 70, 30), (16, 97, 40)]
CAP_CONVS = [CONV_CASES[i] for i in (2, 3, 12, 4)] + [
    ((1, 32, 21, 23), (16, 32, 1, 1), {}),
    ((1, 144, 11, 13), (24, 144, 1, 1), {}),
    ((1, 40, 7, 7), (200, 40, 1, 1), {}),
]


@x86_only
@pytest.mark.parametrize("isa", ["native", "sse", "avx2"])
@pytest.mark.parametrize("case", range(len(CAP_GEMMS) + len(CAP_CONVS)))
def test_capped_kernels(isa, case, monkeypatch):
    """MINIRT_MAX_CPU_ISA=sse / =avx2 run the SSE / AVX2 tiles and depthwise
    planes that a CPU without AVX2 / AVX-512 gets; they must match onnxruntime
    as well as the widest family (native: AVX-512F where the CPU has it)."""
    if isa == "avx2" and not _cpu_has_avx2_fma():
        pytest.skip("needs a CPU with AVX2 and FMA")
    if isa == "native":
        monkeypatch.delenv("MINIRT_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("MINIRT_MAX_CPU_ISA", isa)
    if case < len(CAP_GEMMS):
        m, n, k = CAP_GEMMS[case]
        feeds = {"a": randn(m, k)}
        nodes, extra = with_activation("Gemm", ["a", "b", "c"], "Relu" if case == 1 else None, transB=1)
        check(model_of(nodes, feeds, {"b": randn(n, k), "c": randn(n), **extra}), feeds)
    else:
        x_shape, w_shape, attrs = CAP_CONVS[case - len(CAP_GEMMS)]
        feeds = {"x": randn(*x_shape)}
        nodes, extra = with_activation("Conv", ["x", "w", "b"], (0.0, 6.0), **attrs)
        check(model_of(nodes, feeds, {"w": randn(*w_shape), "b": randn(w_shape[0]), **extra}), feeds)


@x86_only
@pytest.mark.skipif(not _cpu_has_avx2_fma(), reason="needs a CPU with AVX2 and FMA")
def test_isa_cap_switches_the_path(monkeypatch):
    """The cap really changes the code that runs: the AVX2 tiles fuse multiply-add,
    the SSE ones round twice, so a long dot product differs in its last bits."""
    feeds = {"a": randn(6, 4000)}
    model = model_of([helper.make_node("MatMul", ["a", "b"], ["y"])], feeds, {"b": randn(4000, 16)})
    best = testing.run_with_minirt(model, feeds)[0]
    monkeypatch.setenv("MINIRT_MAX_CPU_ISA", "sse")
    sse = testing.run_with_minirt(model, feeds)[0]
    np.testing.assert_allclose(sse, best, rtol=1e-4, atol=1e-3)
    assert not np.array_equal(sse, best)


# --- large planes: several B blocks along N, rows of tiles -------------------------
#
# The AVX-512 driver walks rows of tiles and sizes the B block for L2 (384 KB: 384
# columns at k blocks of 256, 1536 at k = 64), so planes past that width cut N into
# several blocks, each with its own ragged last panel; the residual joins the last
# k block of each. Every ISA cap, against onnxruntime.

LARGE_PLANES = [
    # (c_in, c_out, h, w, kernel, stride): N = 667 = 13 * 48 + 43, k = 300 (two k blocks)
    (300, 70, 23, 29, 1, 1),
    # k = 64 (one k block, B blocks of 1536 columns): N = 1617 = 33 * 49
    (64, 29, 33, 49, 1, 1),
    # 3x3 through im2col, k = 288, stride 2 halves a 41 x 47 plane to 21 x 24 = 504
    (32, 20, 41, 47, 3, 2),
]


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("shape", LARGE_PLANES, ids=lambda s: "{}-{}-{}x{}-k{}s{}".format(*s))
@pytest.mark.parametrize("residual", [False, True])
def test_large_planes_cut_in_b_blocks(isa, shape, residual):
    c_in, c_out, h, w, k, s = shape
    feeds = {"x": randn(1, c_in, h, w)}
    consts = {"w": (randn(c_out, c_in, k, k) * (c_in * k * k) ** -0.5).astype(np.float32), "b": randn(c_out)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[s, s])]
    if residual:
        ho, wo = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
        feeds["r"] = randn(1, c_out, ho, wo)
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    check(model_of(nodes, feeds, consts), feeds)


# --- Convolutions with few input channels (stems) --------------------------------------
# The direct path for C_in <= 4 (AVX-512 and AVX2 kernels; the SSE cap and other
# targets run im2col): output channels in groups of 8 / 4 (17, 40: a ragged last
# group), output rows in strips of 8 (13 rows: 8 + 5), a row in 48 / 24-float
# blocks with the last outputs by 1, 2 or 3 vectors (OW 112 = 48 + 48 + 16, 45,
# 20, 5), batch 2, stride 1 and 2, dilation, pads up to the kernel's extent and
# past it (im2col keeps those), each with every fused activation and a
# residual, on 1 and 2 threads.

STEMS = [
    # (n, c_in, c_out, h, w, kernel, stride, pad, dilation)
    (1, 3, 32, 29, 223, 3, 2, 1, 1),   # MobileNetV2 / EfficientNet-B0's stem, OW 112
    (1, 3, 64, 25, 37, 7, 2, 3, 1),    # ResNet's stem, OW 19
    (2, 1, 17, 13, 45, 3, 1, 1, 1),    # OW 45
    (1, 2, 40, 11, 20, 5, 1, 2, 1),    # OW 20
    (1, 4, 8, 9, 11, 3, 2, 0, 1),      # OW 5, no pad
    (1, 3, 16, 16, 17, 3, 1, 2, 2),    # dilation 2
    (1, 3, 12, 10, 12, 3, 2, 4, 1),    # pads past the kernel's extent
]
STEM_PATTERNS = [None, "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "SiLU", "Add", "Add_Relu",
                 "Add_Clip"]


def with_epilogue(nodes, feeds, consts, rng, shape, pattern, clip):
    """The model of `nodes` (a Conv writing "c" of `shape`) followed by `pattern`:
    None, an activation's op name, "SiLU" (Sigmoid and Mul), "Clip" to `clip`, or
    "Add" of a random residual input "r" and then one of those ("Add_Relu")."""
    src = "c"
    if pattern and pattern.startswith("Add"):
        feeds["r"] = rng.standard_normal(shape).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        src, pattern = "a", pattern[4:] or None
    nodes += activation_nodes(pattern, src, "y", consts, clip=clip)
    return model_of(nodes, feeds, consts), feeds


def stem_case(n, c_in, c_out, h, w, k, s, pad, dil, pattern, seed):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((n, c_in, h, w)).astype(np.float32)}
    consts = {"w": (rng.standard_normal((c_out, c_in, k, k)) * (c_in * k * k) ** -0.5).astype(np.float32),
              "b": rng.standard_normal(c_out).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[s, s],
                              dilations=[dil, dil])]
    ext = (k - 1) * dil + 1
    shape = (n, c_out, (h + 2 * pad - ext) // s + 1, (w + 2 * pad - ext) // s + 1)
    return with_epilogue(nodes, feeds, consts, rng, shape, pattern, clip=(0, 6))


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stem", STEMS, ids=lambda s: "n{}-{}to{}-{}x{}-k{}s{}p{}d{}".format(*s))
@pytest.mark.parametrize("pattern", STEM_PATTERNS, ids=str)
def test_few_input_channel_convs(isa, threads, stem, pattern):
    model, feeds = stem_case(*stem, pattern, seed=STEMS.index(stem))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = testing.run_with_minirt(model, feeds, threads=threads)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# On threads the stem path deals one strip of 8 output rows a task (14 strips of a
# 112-row output had gone 8 + 6 in tasks of two): 13 and 8 strips, batch 2, at
# 1 to 4 threads give the same bytes, and match onnxruntime.
STEM_STRIPS = [
    (1, 3, 24, 200, 40, 3, 2, 1, 1),   # 100 output rows: 13 strips (12 + 4 rows)
    (2, 3, 16, 64, 33, 7, 2, 3, 1),    # 32 rows a batch item: 2 x 4 strips
]


@pytest.mark.parametrize("stem", STEM_STRIPS, ids=lambda s: "n{}-{}to{}-{}x{}-k{}s{}".format(*s))
def test_few_input_channel_convs_same_bytes_on_threads(stem):
    model, feeds = stem_case(*stem, "Add_Relu", seed=7)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    outs = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in (1, 2, 3, 4)]
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4)
    for got in outs[1:]:
        assert got.tobytes() == outs[0].tobytes()


# --- few rows of C: B read in place by the tiles -------------------------------------
# Products of at most 128 rows (a multiple of the tile's 8) with rows of tiles read
# whole B panels from the source, rows a plane apart, and pack only the ragged
# last panel: ResNet-50's 1x1 256 -> 64, FusedConv's residual on narrow layers, a
# MatMul of two activations with 64 rows. Every ISA cap, against onnxruntime.

FEW_ROWS = [
    # (c_in, c_out, h, w, residual): N = 667 = 13 * 48 + 43, two k blocks
    (300, 64, 23, 29, False),
    # N = 400 = 8 * 48 + 16, one k block of 256
    (256, 64, 20, 20, True),
    # 16 rows of C, rows of tiles for the residual; N = 49 = 48 + 1
    (40, 16, 7, 7, True),
    # 56 rows without a residual: columns of tiles, B in place too
    (24, 56, 8, 12, False),
    # 16 and 40 rows by columns of tiles: two k blocks, N = 1147 = 23 * 48 + 43;
    # one k block, N = 98 = 2 * 48 + 2
    (300, 16, 31, 37, False),
    (96, 40, 7, 14, False),
    # 128 rows, N = 99 = 2 * 48 + 3; 96 rows with a residual
    (200, 128, 9, 11, False),
    (72, 96, 5, 13, True),
    # 136 rows: past the limit, B packed
    (64, 136, 6, 10, False),
]


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("shape", FEW_ROWS, ids=lambda s: "{}-{}-{}x{}-{}".format(*s))
def test_few_rows_b_in_place(isa, shape):
    c_in, c_out, h, w, residual = shape
    feeds = {"x": randn(1, c_in, h, w)}
    consts = {"w": (randn(c_out, c_in, 1, 1) * c_in ** -0.5).astype(np.float32), "b": randn(c_out)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"])]
    if residual:
        feeds["r"] = randn(1, c_out, h, w)
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    check(model_of(nodes, feeds, consts), feeds)


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("m,k,n", [(64, 300, 100), (8, 64, 48), (32, 520, 7)])
def test_few_rows_matmul_b_in_place(isa, m, k, n):
    feeds = {"a": randn(m, k), "b": randn(k, n)}
    check(model_of([helper.make_node("MatMul", ["a", "b"], ["y"])], feeds, {}), feeds)



# --- dense convolutions without im2col (AVX-512) ---------------------------------------
# A KxK convolution with whole 64-channel panels of output channels, 16+ input channels
# a group and constant weights runs as 6-pixel x 64-channel tiles whose vectors hold
# output channels and whose broadcasts read the padded input in place, one pixel's tap
# at a time (conv_dense.h), in items of (panel, chunk of up to 192 pixels), a run of
# them a thread, k blocks of 64, then transposed into Y's rows in 16 x 16 blocks with
# the bias and the clamp, then the residual and the activation. Shapes: ResNet-50's 3x3
# (k = 576: nine k blocks; 56 wide: tiles span rows; 784 pixels: five chunks), 196
# pixels in chunks of 96 + 100 (ragged tiles, the transpose's tails), k = 216 and 144
# (a ragged last k block), 180 pixels in one chunk, asymmetric pads, no
# pad, dilation, 5x5, stride 2, pads past the kernel, groups (a panel per group), batch
# 2, 1-D; and 80 output channels (not whole panels: im2col on AVX-512, 16-channel panels
# on AVX2, whose tiles are 6 pixels x 16 channels). Every fused pattern, 1, 2 and 4
# threads (the same bytes), every ISA cap (SSE runs im2col).

DENSE_CONVS = [
    # (n, c_in, c_out, h, w, kernel, pads (top, left, bottom, right), stride, dilation, group)
    (1, 64, 64, 14, 56, 3, (1, 1, 1, 1), 1, 1, 1),
    (1, 256, 64, 14, 14, 3, (1, 1, 1, 1), 1, 1, 1),
    (1, 24, 128, 9, 37, 3, (0, 1, 2, 0), 1, 1, 1),
    (1, 16, 64, 12, 20, 3, (0, 0, 0, 0), 1, 1, 1),
    (2, 16, 64, 11, 30, 3, (2, 2, 2, 2), 1, 2, 1),
    (1, 16, 64, 10, 41, 5, (2, 2, 2, 2), 1, 1, 1),
    (1, 32, 64, 23, 29, 3, (1, 1, 1, 1), 2, 1, 1),
    (1, 64, 128, 10, 25, 3, (1, 1, 1, 1), 1, 1, 2),
    (1, 16, 64, 9, 40, 3, (4, 5, 0, 0), 2, 1, 1),
    (1, 40, 80, 11, 21, 3, (1, 1, 1, 1), 1, 1, 1),
    (1, 16, 64, 1, 200, 3, (0, 1, 0, 1), 1, 1, 1),
]
DENSE_PATTERNS = [None, "Relu", "Clip", "LeakyRelu", "SiLU", "HardSwish", "Add", "Add_Relu", "Add_Clip"]


def dense_case(n, c_in, c_out, h, w, k, pads, stride, dil, group, pattern, seed):
    rng = np.random.default_rng(seed)
    one_d = h == 1
    x_shape = (n, c_in, w) if one_d else (n, c_in, h, w)
    w_shape = (c_out, c_in // group, k) if one_d else (c_out, c_in // group, k, k)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    consts = {"w": (rng.standard_normal(w_shape) * (c_in // group * k * k) ** -0.5).astype(np.float32),
              "b": rng.standard_normal(c_out).astype(np.float32)}
    top, left, bottom, right = pads
    attrs = dict(pads=[left, right], dilations=[dil], strides=[stride]) if one_d else dict(
        pads=[top, left, bottom, right], dilations=[dil, dil], strides=[stride, stride])
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, **attrs)]
    ext = (k - 1) * dil + 1
    ow = (w + left + right - ext) // stride + 1
    shape = (n, c_out, ow) if one_d else (n, c_out, (h + top + bottom - ext) // stride + 1, ow)
    return with_epilogue(nodes, feeds, consts, rng, shape, pattern, clip=(-0.5, 0.75))


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("conv", DENSE_CONVS, ids=lambda s: "n{}-{}to{}-{}x{}-k{}p{}{}{}{}s{}d{}g{}".format(
    *s[:6], *s[6], *s[7:]))
@pytest.mark.parametrize("pattern", DENSE_PATTERNS, ids=str)
def test_dense_convs_without_im2col(isa, conv, pattern):
    model, feeds = dense_case(*conv, pattern, seed=DENSE_CONVS.index(conv))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in (1, 2, 4)]
    assert got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    for g in got[1:]:
        assert g.tobytes() == got[0].tobytes()


@pytest.mark.parametrize("hw,m", [((7, 7), 100), ((14, 14), 100), ((7, 7), 136), ((14, 14), 200)])
def test_extra_column_tiles_same_bytes_at_every_thread_count(hw, m):
    """1x1 convolutions on 49 and 196 pixels (48 + 1, 4 x 48 + 4 columns), with a
    residual and Relu: a thread split that leaves a range of whole row tiles runs the
    8 x 48 + 1 / + 4 tiles, a range with a ragged row tile (100 rows) the edge tiles;
    either way every output is the same bytes."""
    feeds = {"x": randn(1, 300, *hw), "r": randn(1, m, *hw)}
    consts = {"w": randn(m, 300, 1, 1) * 0.06, "b": randn(m)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = model_of(nodes, feeds, consts)
    check(model, feeds)
    one = testing.run_with_minirt(model, feeds)[0]
    for threads in (2, 3):
        np.testing.assert_array_equal(testing.run_with_minirt(model, feeds, threads=threads)[0], one)

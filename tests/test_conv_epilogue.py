"""FusedConv's epilogue: the optimiser folds Conv -> Add (a residual of the same
shape) [-> activation] and Conv -> Relu / Clip / LeakyRelu / Sigmoid / HardSwish /
SiLU (ai.minibuild, or x * Sigmoid(x)) into one FusedConv, and the kernel adds the
residual and applies the activation to each tile it stores (every GEMM family:
AVX-512, AVX2, SSE on this host; NEON in test_arm_kernels.py) and to each
depthwise plane. Every pattern on 1x1 / 3x3 / depthwise / grouped convolutions
is compared with onnxruntime on the unfused model and with minirt's own unfused
path (a second consumer of the convolution's output stops the fusion: then the
Add and the activation run as their own kernels)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import toolchain
from models import assert_matches_onnxruntime, graph_model, optimised

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(2718)


def randn(*shape, scale=1.0, rng=None):
    return ((rng or RNG).standard_normal(shape) * scale).astype(np.float32)


def make_model(nodes, feeds, consts, outputs, opset=17):
    return graph_model(nodes, feeds, consts, outputs, opset, name="epilogue")


def ops_of(g):
    return [(n.domain or "ai.onnx", n.op_type) for n in g.nodes]


def check_ort(model, feeds, rtol=1e-4, atol=1e-4):
    return assert_matches_onnxruntime(model, feeds, rtol, atol)


# The convolutions: pointwise (the GEMM path), 3x3 through im2col, depthwise,
# grouped; odd sizes so tiles have ragged rows and columns.
CONVS = {
    "1x1": ((1, 24, 11, 13), (40, 24, 1, 1), {}),
    "3x3": ((1, 16, 9, 10), (20, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2": ((1, 8, 15, 17), (12, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "depthwise": ((1, 24, 13, 19), (24, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 24}),
    "depthwise_s2": ((1, 16, 14, 14), (16, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 16, "strides": [2, 2]}),
    "grouped": ((1, 12, 8, 9), (18, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 3}),
    "1d": ((1, 10, 37), (14, 10, 3), {"pads": [1, 1]}),
}

# pattern -> (nodes after the conv's output "c", the ops the fused node replaces, its activation)
def pattern_nodes(pattern, out="y"):
    """Nodes from the convolution's output `c` to `out`, and extra constants."""
    if pattern == "add":
        return [helper.make_node("Add", ["c", "r"], [out])], {}
    if pattern == "add_relu":
        return [helper.make_node("Add", ["r", "c"], ["s"]), helper.make_node("Relu", ["s"], [out])], {}
    if pattern == "add_clip":
        return [helper.make_node("Add", ["c", "r"], ["s"]),
                helper.make_node("Clip", ["s", "lo", "hi"], [out])], {"lo": np.float32(0), "hi": np.float32(6)}
    if pattern == "silu":  # as exporters write it: x * Sigmoid(x)
        return [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], [out])], {}
    if pattern == "hardswish":
        return [helper.make_node("HardSwish", ["c"], [out])], {}
    if pattern == "sigmoid":
        return [helper.make_node("Sigmoid", ["c"], [out])], {}
    if pattern == "leakyrelu":
        return [helper.make_node("LeakyRelu", ["c"], [out], alpha=0.15)], {}
    if pattern == "add_hardswish":
        return [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("HardSwish", ["s"], [out])], {}
    raise ValueError(pattern)


FUSED = {"FusedConv", "FusedConvAct"}
# The op each pattern fuses into: FusedConvAct for the vmath activations.
FUSED_OP = {"silu": "FusedConvAct", "hardswish": "FusedConvAct", "sigmoid": "FusedConvAct",
            "add_hardswish": "FusedConvAct"}
PATTERNS = ["add", "add_relu", "add_clip", "silu", "hardswish", "sigmoid", "leakyrelu", "add_hardswish"]
FUSED_AWAY = {"Add", "Relu", "Clip", "Sigmoid", "Mul", "HardSwish", "LeakyRelu", "SiLU"}


def conv_case(conv, pattern, second_consumer=False, bias=True, seed=None):
    """The model and feeds (the same values for the same seed)."""
    rng = np.random.default_rng(seed) if seed is not None else RNG
    x_shape, w_shape, attrs = CONVS[conv]
    probe_out = None
    feeds = {"x": randn(*x_shape, rng=rng)}
    consts = {"w": randn(*w_shape, scale=(np.prod(w_shape[1:])) ** -0.5, rng=rng)}
    inputs = ["x", "w"]
    if bias:
        consts["b"] = randn(w_shape[0], scale=0.3, rng=rng)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], **attrs)]
    tail, extra = pattern_nodes(pattern)
    consts.update(extra)
    nodes += tail
    outputs = ["y"]
    if second_consumer:
        # The convolution's output is read by another node too: nothing may fuse.
        nodes.append(helper.make_node("Neg", ["c"], ["z"]))
        outputs.append("z")
    if any("r" in n.input for n in tail):
        # The residual: an input of the conv's output shape (shape inference gives it).
        probe = make_model(nodes[:1], feeds, consts, ["c"])
        probe_out = [d.dim_value for d in probe.graph.output[0].type.tensor_type.shape.dim]
        feeds["r"] = randn(*probe_out, rng=rng)
    return make_model(nodes, feeds, consts, outputs), feeds


@pytest.mark.parametrize("conv", list(CONVS))
@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_fuses_and_matches(conv, pattern):
    model, feeds = conv_case(conv, pattern, bias=conv != "grouped", seed=11)
    g = optimised(model, feeds)
    assert ops_of(g) == [("ai.minibuild", FUSED_OP.get(pattern, "FusedConv"))], ops_of(g)
    fused = g.nodes[0]
    assert (len(fused.input) == 4) == pattern.startswith("add")
    # Provenance: the fused node stands for every node of the pattern.
    stood_for = {o.split()[0] for _, o in g.origins[fused.name]}
    assert {"Conv"} | {n.op_type for n in model.graph.node[1:]} <= stood_for, stood_for
    got = check_ort(model, feeds)
    # minirt's unfused path (the Conv output also read elsewhere) gives the same
    # y: the epilogue runs the standalone kernels' arithmetic.
    plain, pfeeds = conv_case(conv, pattern, second_consumer=True, bias=conv != "grouped", seed=11)
    plain_ops = {op for _, op in ops_of(optimised(plain, pfeeds))}
    assert not plain_ops & FUSED and plain_ops & FUSED_AWAY
    unfused = testing.run_with_minirt(plain, pfeeds)[0]
    np.testing.assert_allclose(got[0], unfused, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("pattern", ["add_relu", "silu", "hardswish"])
def test_second_consumer_blocks_fusion(pattern):
    model, feeds = conv_case("3x3", pattern, second_consumer=True)
    ops = [op for _, op in ops_of(optimised(model, feeds))]
    assert ops[0] == "Conv" and not set(ops) & FUSED
    assert set(ops) & FUSED_AWAY  # the Add / activation kernels are still needed
    check_ort(model, feeds)


def test_add_output_read_twice_fuses_only_the_add():
    """Conv -> Add whose sum is read by Relu and by the graph: the Add fuses, the Relu stays."""
    model, feeds = conv_case("1x1", "add_relu")
    model.graph.output.append(onnx.helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    model = make_model(list(model.graph.node), feeds,
                       {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}, ["y", "s"])
    g = optimised(model, feeds)
    assert [op for _, op in ops_of(g)] == ["FusedConv", "Relu"]
    assert len(g.nodes[0].input) == 4 and not any(a.name == "activation" for a in g.nodes[0].attribute)
    check_ort(model, feeds)


def test_add_of_a_broadcast_does_not_fuse():
    """Add of a per-channel input (a broadcast, not a residual of Y's shape; a constant
    one would fold into the bias) stays an Add."""
    feeds = {"x": randn(1, 8, 6, 6), "k": randn(1, 8, 1, 1)}
    consts = {"w": randn(8, 8, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "k"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, feeds, consts, ["y"])
    ops = [op for _, op in ops_of(optimised(model, feeds))]
    assert "Add" in ops
    check_ort(model, feeds)


def test_residual_before_the_conv_and_after_it():
    """The residual may be computed after the convolution in node order (the other
    branch of a block): the fused node goes where the Add was."""
    feeds = {"x": randn(1, 16, 10, 10)}
    consts = {"w1": randn(16, 16, 3, 3, scale=0.1), "w2": randn(16, 16, 1, 1, scale=0.2)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["d"]),
             helper.make_node("Add", ["c", "d"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, feeds, consts, ["y"])
    g = optimised(model, feeds)
    assert [op for _, op in ops_of(g)] == ["Conv", "FusedConv"]
    check_ort(model, feeds)


# --- every x86_64 micro-kernel family on this machine ---------------------------------

x86_only = pytest.mark.skipif(toolchain.host_abi() != "x86_64",
                              reason="MINIRT_MAX_CPU_ISA selects among x86_64 micro-kernels")


@x86_only
@pytest.mark.parametrize("isa", ["native", "avx2", "sse"])
@pytest.mark.parametrize("conv", ["1x1", "3x3", "depthwise", "grouped"])
@pytest.mark.parametrize("pattern", ["add_relu", "silu", "hardswish", "leakyrelu"])
def test_capped_epilogues(isa, conv, pattern, monkeypatch):
    if isa == "native":
        monkeypatch.delenv("MINIRT_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("MINIRT_MAX_CPU_ISA", isa)
    model, feeds = conv_case(conv, pattern)
    check_ort(model, feeds)


# --- whole blocks -------------------------------------------------------------------

def resnet_like():
    """Two bottleneck blocks (1x1 -> 3x3 -> 1x1, + identity / + projection, Relu)
    at sizes with full tiles and several k blocks."""
    feeds = {"x": randn(1, 64, 28, 28)}
    consts, nodes = {}, []

    def conv(x, cin, cout, k, out, **attrs):
        consts[out + "_w"] = randn(cout, cin, k, k, scale=(cin * k * k) ** -0.5)
        consts[out + "_b"] = randn(cout, scale=0.1)
        nodes.append(helper.make_node("Conv", [x, out + "_w", out + "_b"], [out], **attrs))
        return out

    def relu(x, out):
        nodes.append(helper.make_node("Relu", [x], [out]))
        return out

    def block(x, cin, mid, cout, tag, stride=1):
        a = relu(conv(x, cin, mid, 1, tag + "a"), tag + "ar")
        b = relu(conv(a, mid, mid, 3, tag + "b", pads=[1, 1, 1, 1], strides=[stride, stride]), tag + "br")
        c = conv(b, mid, cout, 1, tag + "c")
        skip = x if cin == cout and stride == 1 else conv(x, cin, cout, 1, tag + "p", strides=[stride, stride])
        nodes.append(helper.make_node("Add", [c, skip], [tag + "s"]))
        return relu(tag + "s", tag + "out")

    y = block(block("x", 64, 32, 64, "b1"), 64, 48, 128, "b2", stride=2)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    return make_model(nodes, feeds, consts, ["y"]), feeds


def mobilenet_v3_like():
    """Inverted residuals with HardSwish, a squeeze-excite (Sigmoid gate on a
    pooled branch) and an EfficientNet-style SiLU block."""
    feeds = {"x": randn(1, 16, 20, 20)}
    consts, nodes = {}, []
    n = [0]

    def name():
        n[0] += 1
        return f"t{n[0]}"

    def conv(x, cin, cout, k, group=1, stride=1):
        out = name()
        consts[out + "_w"] = randn(cout, cin // group, k, k, scale=(cin // group * k * k) ** -0.5)
        consts[out + "_b"] = randn(cout, scale=0.1)
        nodes.append(helper.make_node("Conv", [x, out + "_w", out + "_b"], [out], group=group,
                                      pads=[k // 2] * 4, strides=[stride, stride]))
        return out

    def op(t, ins, **attrs):
        out = name()
        nodes.append(helper.make_node(t, ins, [out], **attrs))
        return out

    def silu(x):
        return op("Mul", [x, op("Sigmoid", [x])])

    # MobileNetV3: expand (HardSwish), depthwise (HardSwish), SE, project, + residual
    e = op("HardSwish", [conv("x", 16, 64, 1)])
    d = op("HardSwish", [conv(e, 64, 64, 3, group=64)])
    se = op("GlobalAveragePool", [d])
    se = op("Relu", [conv(se, 64, 16, 1)])
    gate = op("HardSigmoid", [conv(se, 16, 64, 1)], alpha=1 / 6, beta=0.5)
    d = op("Mul", [d, gate])
    p = op("Add", [conv(d, 64, 16, 1), "x"])
    # EfficientNet: expand (SiLU), depthwise stride 2 (SiLU), SE with Sigmoid, project
    e = silu(conv(p, 16, 96, 1))
    d = silu(conv(e, 96, 96, 5, group=96, stride=2))
    s = op("Sigmoid", [conv(silu(conv(op("GlobalAveragePool", [d]), 96, 8, 1)), 8, 96, 1)])
    d = op("Mul", [d, s])
    y = conv(d, 96, 24, 1)
    nodes.append(helper.make_node("LeakyRelu", [y], ["y"], alpha=0.05))
    return make_model(nodes, feeds, consts, ["y"]), feeds


@pytest.mark.parametrize("isa", ["native", "sse"] if toolchain.host_abi() == "x86_64" else ["native"])
def test_resnet_like_blocks(isa, monkeypatch):
    if isa == "native":
        monkeypatch.delenv("MINIRT_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("MINIRT_MAX_CPU_ISA", isa)
    model, feeds = resnet_like()
    g = optimised(model, feeds)
    ops = [op for _, op in ops_of(g)]
    assert ops.count("Add") == 0 and ops.count("Relu") == 0 and ops.count("Conv") == 1, ops
    assert sum(len(n.input) == 4 for n in g.nodes) == 2  # both residual Adds fused
    check_ort(model, feeds)


def test_mobilenet_v3_like_blocks():
    model, feeds = mobilenet_v3_like()
    g = optimised(model, feeds)
    ops = [op for _, op in ops_of(g)]
    # Every conv is fused but the one feeding HardSigmoid (not an epilogue FusedConv has).
    assert "HardSwish" not in ops and "Add" not in ops and "LeakyRelu" not in ops and "SiLU" not in ops, ops
    assert "Sigmoid" not in ops and ops.count("Conv") == 1 and "HardSigmoid" in ops, ops
    check_ort(model, feeds)


def _fused_by_hand(op, activation=None, residual=1, r_shape=(1, 8, 6, 6)):
    """A FusedConv / FusedConvAct node written directly (as a corrupt or hand-made model would)."""
    feeds = {"x": randn(1, 8, 6, 6), "r": randn(*r_shape)}
    attrs = {"residual": residual, **({"activation": activation} if activation else {})}
    node = helper.make_node(op, ["x", "w", "", "r"], ["y"], domain="ai.minibuild", **attrs)
    graph = helper.make_graph([node], "hand",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [numpy_helper.from_array(randn(8, 8, 1, 1), "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.minibuild", 1)])
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("op,activation,residual,r_shape,message", [
    ("FusedConv", "Relu", 1, (1, 8, 3, 6), "residual \\(input 3\\) must have Y's shape"),
    ("FusedConv", "Relu", 2, (1, 8, 6, 6), "residual must be 0 or 1"),
    ("FusedConvAct", "Relu", 0, (1, 8, 6, 6), "attribute activation='Relu' not supported"),
])
def test_bad_fused_nodes_are_refused_by_name(op, activation, residual, r_shape, message):
    model, feeds = _fused_by_hand(op, activation, residual, r_shape)
    import minirt
    with pytest.raises(Exception, match=message) as err:
        testing.run_with_minirt(model, feeds)
    assert op in str(err.value)


# --- the residual inside the GEMM's register tiles ----------------------------------
#
# On the last k block each AVX-512 / AVX2 tile adds the residual and clamps before
# it stores, so the post stage has nothing left for FusedConv(residual=1) -> Relu /
# Clip / none; the SSE and NEON families keep the post stage. The edge tiles
# (rows past a multiple of mr, columns past a multiple of nr) go through local
# copies of C and of the residual; every family must give the unfused graph's
# bytes: (acc + bias) + residual, then the Relu / Clip kernel's selects.

# (c_in, c_out, h, w, kernel): c_out against mr = 8 (AVX-512, NEON) / 6 (AVX2, SSE):
# 29 = 3*8+5 and 4*6+5 (a partial-row tile), 25 = 3*8+1 and 4*6+1 (one-row tiles),
# 19; N = h*w against nr = 48 / 16 / 8: 49 = 48+1 (the 2-column tile), 143 = 2*48+47,
# 30, 50 = 48+2; c_in = 300 is two k blocks (the residual joins on the second only).
RESIDUAL_SHAPES = [
    (24, 29, 7, 7, 1),
    (300, 25, 11, 13, 1),
    (16, 19, 5, 6, 3),
    (40, 48, 5, 10, 3),
    (64, 64, 9, 9, 1),
    (300, 136, 7, 7, 1),  # 49 columns, whole row tiles, packed B: the 8 x 48 + 1 tile adds the residual too
    (200, 136, 14, 14, 1),  # 196 columns: the 8 x 48 + 4 tile
]


def residual_case(c_in, c_out, h, w, k, pattern, split=False, seed=5):
    """Conv -> Add(residual) [-> Relu / Clip]; split: the conv's output is also a
    graph output, which keeps the Add and the activation as their own kernels."""
    rng = np.random.default_rng(seed)
    feeds = {"x": randn(1, c_in, h, w, rng=rng), "r": randn(1, c_out, h, w, rng=rng)}
    consts = {"w": randn(c_out, c_in, k, k, scale=(c_in * k * k) ** -0.5, rng=rng),
              "b": randn(c_out, scale=0.3, rng=rng)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4)]
    tail, extra = pattern_nodes(pattern)
    consts.update(extra)
    return make_model(nodes + tail, feeds, consts, ["y", "c"] if split else ["y"]), feeds


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("shape", RESIDUAL_SHAPES, ids=lambda s: "{}-{}-{}x{}-k{}".format(*s))
@pytest.mark.parametrize("pattern", ["add", "add_relu", "add_clip"])
def test_residual_in_tiles_is_the_unfused_graph(isa, shape, pattern):
    model, feeds = residual_case(*shape, pattern)
    g = optimised(model, feeds)
    assert ops_of(g) == [("ai.minibuild", "FusedConv")] and len(g.nodes[0].input) == 4, ops_of(g)
    got = check_ort(model, feeds)[0]
    plain, pfeeds = residual_case(*shape, pattern, split=True)
    assert {op for _, op in ops_of(optimised(plain, pfeeds))} & {"Add"}
    want = testing.run_with_minirt(plain, pfeeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
def test_residual_then_leakyrelu_keeps_its_post_stage(isa):
    """Add then LeakyRelu: the tiles add the residual, the post stage still runs
    the LeakyRelu on what they stored."""
    model, feeds = residual_case(24, 29, 7, 7, 1, "add")
    model.graph.node[-1].output[0] = "s"
    model.graph.node.append(helper.make_node("LeakyRelu", ["s"], ["y"], alpha=0.15))
    g = optimised(model, feeds)
    assert [op for _, op in ops_of(g)] == ["FusedConv"], ops_of(g)
    check_ort(model, feeds)


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
def test_gemm_and_matmul_with_ragged_tiles_add_no_residual(isa):
    """Gemm (bias, Relu after) and MatMul share the tiles but never pass a residual:
    an Add after them stays an Add and their outputs match onnxruntime."""
    rng = np.random.default_rng(9)
    feeds = {"a": randn(29, 300, rng=rng), "r": randn(29, 49, rng=rng), "m": randn(49, 25, rng=rng)}
    consts = {"w": randn(49, 300, scale=300 ** -0.5, rng=rng), "b": randn(49, scale=0.3, rng=rng)}
    nodes = [helper.make_node("Gemm", ["a", "w", "b"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["gr"]),
             helper.make_node("Add", ["gr", "r"], ["y"]),
             helper.make_node("MatMul", ["y", "m"], ["z"])]
    model = make_model(nodes, feeds, consts, ["y", "z"])
    check_ort(model, feeds)


@pytest.mark.parametrize("isa", [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None],
                         indirect=True)
@pytest.mark.parametrize("shape", [(24, 29, 7, 7, 1), (16, 19, 5, 6, 3), (32, 8, 1, 1, 1)],
                         ids=lambda s: "{}-{}-{}x{}-k{}".format(*s))
def test_residual_then_clip_with_min_above_max_is_max(isa, shape):
    """Clip(min=1.5, max=-0.5) after the residual: min(max(x, 1.5), -0.5) is -0.5
    everywhere (numpy.clip, onnxruntime, the Clip kernel), whether the tiles or
    the post stage (SSE, and a 1x1 plane whose blocks span all of C) apply it."""
    model, feeds = residual_case(*shape, "add_clip")
    lo, hi = (i for i in model.graph.initializer if i.name in ("lo", "hi"))
    for init, v in ((lo, 1.5), (hi, -0.5)):
        init.CopyFrom(numpy_helper.from_array(np.float32(v), init.name))
    g = optimised(model, feeds)
    assert ops_of(g) == [("ai.minibuild", "FusedConv")] and len(g.nodes[0].input) == 4, ops_of(g)
    got = check_ort(model, feeds, rtol=0, atol=0)[0]
    np.testing.assert_array_equal(got, np.full_like(got, -0.5))
    plain, pfeeds = residual_case(*shape, "add_clip", split=True)
    for init in plain.graph.initializer:
        if init.name in ("lo", "hi"):
            init.CopyFrom(numpy_helper.from_array(np.float32(1.5 if init.name == "lo" else -0.5), init.name))
    np.testing.assert_array_equal(testing.run_with_minirt(plain, pfeeds)[0], got)

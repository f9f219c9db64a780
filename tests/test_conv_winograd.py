"""Winograd F(2x2, 3x3) (conv_winograd.h): 3x3 stride-1 convolutions with whole
64-channel panels of output channels, 16+ input channels, constant weights and
planes of 196+ outputs run on the AVX-512 kernel as 16 products of transformed
inputs and weights, in chunks of up to 64 2x2 tiles (whole tile rows), the
ragged last tile column and row of odd sizes masked off; on the AVX2 kernel the
same with 16-channel panels, vectors of 8 tiles read from the padded copy. Against onnxruntime:
C_in 16 / 48 / 64 / 96 / 256, C_out 64 / 128 / 256, planes 14 x 14 / 28 x 28 /
56 x 56 and odd / rectangular ones, pads 0 / 1 / asymmetric / past the kernel
(the input transform reads the input itself, the pads masked off), batch 2, with and
without bias, no activation / Relu / Clip / the residual Add fused (and in place,
the 3x3 Conv itself taking the Add of a ResNet-style block); the same bytes at 1,
2 and 4 threads; the AVX2 and SSE caps (Winograd's AVX2 path / im2col). That the path
runs where it should and nowhere else is shown without timings: a +inf in a
tile's input window meets its negation in the input transform (d1 + d2 against
d2 - d1), so outputs next to it come out -inf or NaN, where every direct sum of
positive weights gives +inf."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from minibuild import convert, toolchain
from models import graph_model, optimised

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

X86 = toolchain.host_abi() == "x86_64"
ISAS = [None, "avx2", "sse"] if X86 else [None]

# (n, c_in, c_out, h, w, pads (top, left, bottom, right)): the output is h + top + bottom - 2 high
CONVS = [
    (1, 64, 64, 56, 56, (1, 1, 1, 1)),     # ResNet-50 layer1: 28 tiles a row, chunks of 2 rows
    (1, 128, 128, 28, 28, (1, 1, 1, 1)),   # layer2: chunks of 4 tile rows
    (1, 256, 256, 14, 14, (1, 1, 1, 1)),   # layer3: one chunk of 49 tiles, 4 panels
    (1, 16, 64, 14, 14, (1, 1, 1, 1)),     # the fewest input channels the path takes
    (1, 48, 128, 15, 17, (0, 1, 2, 0)),    # asymmetric pads, odd rows and columns (ragged tiles)
    (2, 96, 64, 21, 28, (0, 0, 0, 0)),     # no pad (the padded copy is still made), batch 2, odd rows
    (1, 64, 256, 13, 31, (1, 2, 1, 0)),    # rectangular, odd, 16 + 15 tiles a row
    (1, 256, 64, 16, 16, (1, 1, 1, 1)),    # k = 256: four k blocks a product
    (1, 80, 64, 20, 70, (1, 1, 1, 1)),     # a ragged last k block (80 = 64 + 16), 35 tiles a row
    (1, 32, 64, 12, 40, (3, 4, 2, 5)),     # pads past the kernel: whole rows and masked columns of zeros
]
PATTERNS = [None, "Relu", "Clip", "Add", "Add_Relu", "nobias"]


def conv_model(n, c_in, c_out, h, w, pads, pattern, seed):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((n, c_in, h, w)).astype(np.float32)}
    consts = {"w": (rng.standard_normal((c_out, c_in, 3, 3)) * (c_in * 9) ** -0.5).astype(np.float32)}
    ins = ["x", "w"]
    if pattern != "nobias":
        consts["b"] = rng.standard_normal(c_out).astype(np.float32)
        ins.append("b")
    top, left, bottom, right = pads
    out_shape = (n, c_out, h + top + bottom - 2, w + left + right - 2)
    direct = pattern in (None, "nobias")
    nodes = [helper.make_node("Conv", ins, ["y" if direct else "c"], pads=[top, left, bottom, right])]
    if pattern == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif pattern == "Clip":
        consts["lo"], consts["hi"] = np.float32(-0.5), np.float32(0.75)
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif not direct:
        feeds["r"] = rng.standard_normal(out_shape).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["y" if pattern == "Add" else "s"]))
        if pattern == "Add_Relu":
            nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    return graph_model(nodes, feeds, consts, ["y"], 17, name="winograd"), feeds


def onnxruntime_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def check_threads(model, feeds, want, threads=(1, 2, 4)):
    got = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in threads]
    assert got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    for g in got[1:]:
        assert g.tobytes() == got[0].tobytes()
    return got[0]


@pytest.mark.parametrize("conv", CONVS, ids=lambda s: "n{}-{}to{}-{}x{}-p{}{}{}{}".format(*s[:5], *s[5]))
@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
def test_winograd_matches_onnxruntime(conv, pattern):
    model, feeds = conv_model(*conv, pattern, seed=CONVS.index(conv))
    fused = {n.op_type for n in optimised(model, feeds).nodes}
    assert fused == ({"Conv"} if pattern in (None, "nobias") else {"FusedConv"})
    check_threads(model, feeds, onnxruntime_run(model, feeds))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("conv", [CONVS[2], CONVS[4], CONVS[6]], ids=["256-14x14", "48-15x17", "64-13x31"])
@pytest.mark.parametrize("pattern", ["Relu", "Add_Relu"])
def test_every_isa_cap(isa, conv, pattern):
    """Under the AVX2 cap Winograd's AVX2 path runs (16-channel panels, the padded
    copy), under SSE im2col."""
    model, feeds = conv_model(*conv, pattern, seed=7)
    check_threads(model, feeds, onnxruntime_run(model, feeds), threads=(1, 2))


def basic_block(c, hw, act="Relu", seed=0):
    """Relu(X) -> 1x1 Conv -> Relu (the shortcut: a tensor no Conv writes last) ;
    Relu(X) -> 3x3 Conv ; Add(3x3, shortcut) -> act -> 1x1 Conv. Only the 3x3 Conv
    can take the Add, and its residual dies there: Y goes into the residual's
    memory and the path reads the residual's copy."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    consts = {"Wa": (rng.standard_normal((c, c, 1, 1)) * c ** -0.5).astype(np.float32),
              "Wb": (rng.standard_normal((c, c, 3, 3)) * (9 * c) ** -0.5).astype(np.float32),
              "Bb": (rng.standard_normal(c) * 0.1).astype(np.float32),
              "Wc": (rng.standard_normal((8, c, 1, 1)) * c ** -0.5).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["X"], ["xr"]),
             helper.make_node("Conv", ["xr", "Wa"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["xr", "Wb", "Bb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "ar"], ["s"])]
    last = "s"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["s"], ["t"]))
        last = "t"
    elif act == "Clip":
        consts["lo"], consts["hi"] = np.float32(0.0), np.float32(0.5)
        nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["t"]))
        last = "t"
    nodes.append(helper.make_node("Conv", [last, "Wc"], ["Y"]))
    return graph_model(nodes, {"X": x}, consts, ["Y"], 17, name="block"), {"X": x}


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("c, hw, act", [(64, 14, "Relu"), (128, 17, "Clip"), (64, 56, None)])
def test_in_place_residual(isa, c, hw, act, monkeypatch):
    model, feeds = basic_block(c, hw, act)
    plans = []
    real = convert.plan_memory
    monkeypatch.setattr(convert, "plan_memory", lambda *a: plans.append(real(*a)) or plans[-1])
    fused = [n for n in optimised(model, feeds).nodes if n.op_type == "FusedConv" and len(n.input) == 4]
    assert len(fused) == 1 and fused[0].input[1] == "Wb"
    want = onnxruntime_run(model, feeds)
    check_threads(model, feeds, want)
    assert plans and all(p.in_place == 1 for p in plans)


def inf_model(c_in, c_out, h, w, stride=1, pads=(1, 1, 1, 1)):
    """All-ones input with one +inf, positive weights: every direct sum that reads
    the +inf is +inf."""
    x = np.ones((1, c_in, h, w), np.float32)
    x[0, c_in // 2, h // 2, w // 2] = np.inf
    consts = {"w": np.full((c_out, c_in, 3, 3), 0.1, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=list(pads), strides=[stride, stride])]
    return graph_model(nodes, {"x": x}, consts, ["y"], 17, name="inf"), {"x": x}


def winograd_ran(model, feeds):
    """The outputs that read the +inf: all +inf from a direct sum; -inf or NaN
    among them from Winograd's transforms."""
    y = testing.run_with_minirt(model, feeds)[0]
    want = onnxruntime_run(model, feeds)
    reads = np.isinf(want)
    assert reads.any() and (want[reads] > 0).all()
    np.testing.assert_array_equal(np.isfinite(y), np.isfinite(want))  # the finite outputs are untouched
    return not (y[reads] == np.inf).all()


def kernel_family(isa):
    """The GEMM family that runs on this host under the cap ISA (None: the best)."""
    flags = set(next((ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")), "").split())
    best = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "sse"
    order = ["sse", "avx2", "avx512"]
    return best if isa is None else order[min(order.index(isa), order.index(best))]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape, taken_on", [
    ((16, 64, 14, 14), {"avx512", "avx2"}),   # the smallest plane and fewest input channels it takes
    ((64, 128, 28, 28), {"avx512", "avx2"}),
    ((16, 64, 13, 15), set()),                # 13 x 15 = 195 outputs: the dense path
    ((512, 512, 7, 7), set()),                # ResNet-50 layer4: the dense path
    ((16, 80, 28, 28), {"avx2"}),             # whole 16-channel panels (AVX2), not 64 (AVX-512)
    ((15, 64, 28, 28), set()),                # too few input channels
], ids=["16to64-14x14", "64to128-28x28", "13x15", "512-7x7", "80ch", "15in"])
def test_path_taken_where_it_should(isa, shape, taken_on):
    model, feeds = inf_model(*shape)
    assert winograd_ran(model, feeds) == (X86 and kernel_family(isa) in taken_on)


@pytest.mark.parametrize("attrs", [dict(stride=2), dict(pads=(0, 0, 0, 0))], ids=["stride2", "nopad"])
def test_not_strided(attrs):
    """Stride 2 keeps the dense path; no pad is Winograd too (with its own padded copy)."""
    model, feeds = inf_model(64, 64, 29, 29, **attrs)
    assert winograd_ran(model, feeds) == (attrs.get("stride", 1) == 1 and X86)


def test_runtime_weights_keep_the_direct_sum():
    """Weights fed at run time cannot be transformed at prepare: im2col."""
    model, feeds = inf_model(16, 64, 14, 14)
    feeds = dict(feeds, w=np.full((64, 16, 3, 3), 0.1, np.float32))
    g = model.graph
    w = next(i for i in g.initializer if i.name == "w")
    g.initializer.remove(w)
    g.input.append(helper.make_tensor_value_info("w", 1, [64, 16, 3, 3]))
    assert not winograd_ran(model, feeds)

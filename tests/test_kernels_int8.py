"""The int8 kernels of the dynamic-quantisation path against onnxruntime: QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, MatMulInteger (on the qgemm support unit) on
the shapes quantised transformers and CNNs run, and a BERT-small quantised by
onnxruntime.quantization.quantize_dynamic end to end through minibuild.

Integer outputs must equal onnxruntime's bit for bit (so must the float results of
DequantizeLinear and DynamicQuantizeLinear's scale, which use the same arithmetic);
every qgemm micro-kernel family is run by capping the ISA (MINIRT_MAX_CPU_ISA)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from minibuild import ortref
ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(11)
ISAS = [None, "avx512vnni", "avxvnni", "avx2", "sse"]  # qgemm families on x86_64: best (AMX here), AVX512-VNNI, AVX-VNNI, AVX2, SSE


def _vi(name, arr):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype), np.shape(arr))


def model_of(op, feeds, consts=None, inputs=None, outputs=("out",), opset=13, **attrs):
    consts = consts or {}
    names = inputs if inputs is not None else list(feeds) + list(consts)
    node = helper.make_node(op, names, list(outputs), **attrs)
    graph = helper.make_graph([node], "t", [_vi(k, v) for k, v in feeds.items()],
                              [helper.make_tensor_value_info(o, 0, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    for vi, inf in zip(model.graph.output, inferred.graph.output):
        vi.type.CopyFrom(inf.type)
    return model


def run_both(model, feeds):
    """(minirt's outputs, onnxruntime's), after typing the graph outputs from onnxruntime's run."""
    want = ortref.reference_session(model).run(None, feeds)
    for vi, w in zip(model.graph.output, want):
        tt = vi.type.tensor_type
        tt.elem_type = helper.np_dtype_to_tensor_dtype(w.dtype)
        tt.shape.Clear()
        for d in w.shape:
            tt.shape.dim.add().dim_value = d
    return testing.run_with_minirt(model, feeds), want


def check_exact(model, feeds):
    got, want = run_both(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w)
    return got


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------

def _halfway(shape, scale, zp, lo, hi):
    """Values on and next to the rounding boundaries (k + 0.5) * scale, and past saturation."""
    k = RNG.integers(lo - zp - 4, hi - zp + 4, size=shape).astype(np.float32)
    frac = RNG.choice(np.float32([0.5, -0.5, 0.49999, 0.50001, 0.0, 0.25]), size=shape)
    return ((k + frac) * np.float32(scale)).astype(np.float32)


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(opset, qtype):
    info = np.iinfo(qtype)
    zp = qtype(3 if qtype == np.int8 else 131)
    x = _halfway((1, 64, 768), 0.0213, int(zp), info.min, info.max)
    x.flat[:4] = [np.inf, -np.inf, 1e30, -1e30]
    check_exact(model_of("QuantizeLinear", {"x": x}, {"s": np.float32(0.0213), "z": zp}, opset=opset), {"x": x})


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_quantize_without_zero_point(qtype):
    x = _halfway((3, 197, 64), 0.05, 0, -200, 200)
    got = check_exact(model_of("QuantizeLinear", {"x": x}, {"s": np.float32(0.05)}, opset=13), {"x": x})
    assert got[0].dtype == np.uint8  # no zero point: uint8, whatever qtype says


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,axis", [((64, 32, 3, 3), 0), ((1, 96, 28, 28), 1), ((1, 50, 384), -1)])
def test_quantize_per_axis(qtype, shape, axis):
    c = shape[axis]
    scale = (RNG.random(c) * 0.05 + 0.001).astype(np.float32)
    zp = RNG.integers(-20, 20, c).astype(qtype) if qtype == np.int8 else RNG.integers(100, 150, c).astype(qtype)
    x = (RNG.standard_normal(shape) * 2).astype(np.float32)
    check_exact(model_of("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, opset=13, axis=axis), {"x": x})


@pytest.mark.parametrize("qtype", [np.uint8, np.int8, np.int32])
def test_dequantize_per_tensor(qtype):
    info = np.iinfo(qtype)
    lo, hi = (info.min, info.max) if qtype != np.int32 else (-(1 << 20), 1 << 20)
    x = RNG.integers(lo, hi, size=(1, 64, 768), endpoint=True).astype(qtype)
    zp = qtype(0 if qtype == np.int32 else (7 if qtype == np.int8 else 128))
    for opset in (10, 13, 21):
        check_exact(model_of("DequantizeLinear", {"x": x}, {"s": np.float32(0.0173), "z": zp}, opset=opset), {"x": x})


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_dequantize_per_axis_conv_weights(qtype):
    w = RNG.integers(np.iinfo(qtype).min, np.iinfo(qtype).max, size=(64, 32, 3, 3), endpoint=True).astype(qtype)
    scale = (RNG.random(64) * 0.01 + 1e-4).astype(np.float32)
    zp = np.zeros(64, qtype)
    check_exact(model_of("DequantizeLinear", {"w": w}, {"s": scale, "z": zp}, opset=13, axis=0), {"w": w})


def test_blocked_quantize_is_refused_at_select():
    from minibuild.errors import UnsupportedOpsError
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    m = model_of("QuantizeLinear", {"x": x}, {"s": np.ones((4, 2), np.float32), "z": np.zeros((4, 2), np.uint8)},
                 opset=21, axis=1, block_size=4)
    with pytest.raises(UnsupportedOpsError, match="block_size"):
        testing.run_with_minirt(m, {"x": x})


# --- DynamicQuantizeLinear ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "zeros", "tiny", "odd_length"])
def test_dynamic_quantize_matches_onnxruntime(kind):
    shape = (1, 64, 128) if kind != "odd_length" else (3, 37)
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    if kind == "positive":
        x = np.abs(x) + 0.5
    elif kind == "negative":
        x = -np.abs(x) - 0.5
    elif kind == "zeros":
        x = np.zeros(shape, np.float32)
    elif kind == "tiny":
        x = x * np.float32(1e-30)
    m = model_of("DynamicQuantizeLinear", {"x": x}, outputs=("y", "scale", "zp"), opset=11)
    y, s, z = check_exact(m, {"x": x})
    assert y.dtype == np.uint8 and s.dtype == np.float32 and z.dtype == np.uint8


# --- MatMulInteger ------------------------------------------------------------------------

def _q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _ref_matmulinteger(a, b, za, zb):
    a32 = a.astype(np.int64) - (np.asarray(za).astype(np.int64).reshape(-1, 1) if np.ndim(za) else np.int64(za))
    b32 = b.astype(np.int64) - np.asarray(zb).astype(np.int64)
    return np.matmul(a32, b32).astype(np.int32)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("m,k,n", [(64, 128, 128), (64, 128, 512), (64, 512, 128), (37, 61, 29), (1, 768, 3072),
                                   (5, 1, 7)])
def test_matmulinteger_u8s8_like_dynamic_bert(isa, m, k, n):
    """A from DynamicQuantizeLinear (run time, uint8 with a run-time zero point), B the
    int8 weights (constant, symmetric): quantize_dynamic's default."""
    a, b = _q((1, m, k), np.uint8), _q((k, n), np.int8)
    za, zb = np.uint8(RNG.integers(0, 256)), np.int8(0)
    got = check_exact(model_of("MatMulInteger", {"a": a, "za": np.asarray(za)}, {"b": b, "zb": zb},
                               inputs=["a", "b", "za", "zb"]), {"a": a, "za": np.asarray(za)})
    np.testing.assert_array_equal(got[0], _ref_matmulinteger(a, b, za, zb))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("ta,tb", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)])
def test_matmulinteger_types_zero_points_per_column(isa, ta, tb):
    """Every signature, extreme values and zero points, per-column b zero points,
    B given at run time too (packed per run). Reference: exact numpy."""
    m, k, n = 23, 97, 45
    a, b = _q((m, k), ta), _q((k, n), tb)
    a[0, :] = np.iinfo(ta).min
    b[:, 0] = np.iinfo(tb).max
    za = ta(np.iinfo(ta).max)
    zb = _q((n,), tb)
    want = _ref_matmulinteger(a, b, za, zb)
    for consts in ({"b": b, "zb": zb}, {}):
        feeds = {"a": a, "za": np.asarray(za)}
        if not consts:
            feeds.update(b=b, zb=zb)
        m_ = model_of("MatMulInteger", feeds, consts, inputs=["a", "b", "za", "zb"])
        m_.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.INT32
        got = testing.run_with_minirt(m_, feeds, constant_inputs=list(consts))
        np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_matmulinteger_batched_broadcast_and_per_row_a_zero(isa):
    a, b = _q((2, 3, 20, 33), np.uint8), _q((2, 1, 33, 18), np.int8)
    feeds = {"a": a, "b": b}
    check_exact(model_of("MatMulInteger", feeds), feeds)
    a2 = _q((20, 33), np.uint8)
    za = _q((20,), np.uint8)
    feeds = {"a": a2, "za": za}
    m_ = model_of("MatMulInteger", feeds, {"b": b[0, 0]}, inputs=["a", "b", "za"])
    m_.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.INT32
    got = testing.run_with_minirt(m_, feeds)
    np.testing.assert_array_equal(got[0], _ref_matmulinteger(a2, b[0, 0], za, 0))


def test_matmulinteger_1d_operands():
    a, b = _q((40,), np.uint8), _q((40, 9), np.int8)
    check_exact(model_of("MatMulInteger", {"a": a}, {"b": b}), {"a": a})
    a2, b2 = _q((6, 40), np.uint8), _q((40,), np.int8)
    check_exact(model_of("MatMulInteger", {"a": a2}, {"b": b2}), {"a": a2})


# --- dynamically quantised BERT-small, end to end ----------------------------------------

@pytest.mark.parametrize("weights,per_channel", [("QInt8", False), ("QInt8", True), ("QUInt8", True)])
def test_dynamic_quantized_bert_small_end_to_end(tmp_path_factory, artifacts_dir, weights, per_channel):
    """tests/exporters.py's BERT-small (random weights), quantised by
    onnxruntime.quantization.quantize_dynamic (int8 or uint8 weights, per tensor or per
    output channel, uint8 activations:
    DynamicQuantizeLinear + MatMulInteger + Cast + Mul), built by minibuild for the
    host and run against onnxruntime on the same inputs. The integer work is exact,
    so only float rounding elsewhere differs: within 1e-4 of each output's range."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from onnxruntime.quantization import QuantType, quantize_dynamic
    sys.path.insert(0, str(Path(__file__).parent))
    import exporters as ex
    from minibuild import toolchain
    from minibuild.pipeline import Options, run_build
    from minibuild.verify import import_minirt

    spec = ex.SPECS["bert_small"]
    cache = Path(os.environ.get("MINIBUILD_EXPORT_CACHE") or tmp_path_factory.getbasetemp().parent / "minibuild-exports")
    src, _ = ex.export_cached(spec, cache)
    work = tmp_path_factory.mktemp("bert_dyn")
    (work / "models").mkdir()
    qpath = work / "models" / "bert_small_dyn.onnx"
    quantize_dynamic(str(src / "bert_small.onnx"), str(qpath), weight_type=getattr(QuantType, weights),
                     per_channel=per_channel)
    ops = {n.op_type for n in onnx.load(qpath).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    build = run_build(Options(models=work / "models", out=work / "out", platforms=["linux"],
                              abis=[toolchain.host_abi()], fixed_dims=spec.fixed_dims()))
    minirt = import_minirt(work / "out")
    feeds = spec.feeds(np.random.default_rng(7))
    sess = minirt.InferenceSession(str(build.model_files["bert_small_dyn"]))
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(None, feeds)
    sess.close()
    ref = ortref.reference_session(qpath).run(names, feeds)
    results = ex.compare_outputs(names, got, ref)
    lines = [f"{r.name} {r.shape}: max abs err {r.max_abs_err:.3g}, range {r.range:.3g}, rel {r.rel:.3g}"
             for r in results]
    tag = f"{weights}{'_per_channel' if per_channel else ''}"
    (artifacts_dir / f"bert_small_dynamic_{tag}.txt").write_text("\n".join(lines) + "\n")
    assert all(r.ok for r in results), lines


# --- ConvInteger ----------------------------------------------------------------------------

CONV_CASES = {  # x shape, w shape, attributes
    "3x3_pad1": ((1, 32, 28, 28), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_stride2_asym_pad": ((2, 16, 17, 15), (24, 16, 3, 3), dict(pads=[0, 1, 1, 0], strides=[2, 2])),
    "depthwise": ((1, 32, 14, 14), (32, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=32)),
    "grouped_dilated": ((1, 8, 12, 12), (12, 2, 3, 3), dict(group=4, dilations=[2, 2])),
    "1x1_direct": ((1, 64, 7, 7), (96, 64, 1, 1), {}),
    "same_upper_stride2": ((1, 3, 20, 21), (8, 3, 5, 5), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "conv1d": ((2, 12, 50), (10, 12, 5), dict(pads=[2, 2])),
}


@pytest.mark.parametrize("isa", [None, "avx2"], indirect=True)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convinteger_matches_onnxruntime(isa, case):
    xs, ws, attrs = CONV_CASES[case]
    x, w = _q(xs, np.uint8), _q(ws, np.uint8)
    zx, zw = np.uint8(RNG.integers(0, 256)), np.uint8(RNG.integers(0, 256))
    feeds = {"x": x, "zx": np.asarray(zx)}
    check_exact(model_of("ConvInteger", feeds, {"w": w, "zw": zw}, inputs=["x", "w", "zx", "zw"], **attrs), feeds)


def test_convinteger_int8_weights_per_filter_zero_points():
    """Signatures onnxruntime's CPU kernel lacks: against exact numpy (float64 conv of
    the zero-point-shifted operands, via onnxruntime's float Conv)."""
    x, w = _q((1, 6, 9, 9), np.uint8), _q((4, 6, 3, 3), np.int8)
    zx, zw = np.uint8(9), _q((4,), np.int8)
    feeds = {"x": x, "zx": np.asarray(zx)}
    m = model_of("ConvInteger", feeds, {"w": w, "zw": zw}, inputs=["x", "w", "zx", "zw"], pads=[1, 1, 1, 1])
    got = testing.run_with_minirt(m, feeds)[0]
    xf = (x.astype(np.float32) - np.float32(zx))
    wf = (w.astype(np.float32) - zw.astype(np.float32).reshape(4, 1, 1, 1))
    ref_m = model_of("Conv", {"x": xf}, {"w": wf}, pads=[1, 1, 1, 1])
    want = ortref.reference_session(ref_m).run(None, {"x": xf})[0]
    # padding contributes x_zero_point - x_zero_point = 0, as the shifted float Conv's zeros
    np.testing.assert_array_equal(got, want.astype(np.int32))

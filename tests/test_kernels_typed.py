"""The type-family kernels transformer graphs need beyond float32 arithmetic, against
onnxruntime on the shapes those models run: Gather (embeddings by int64 token ids),
GatherElements, GatherND, Where (attention masks), Cast, Expand, the comparisons,
And/Or/Xor/Not, IsNaN/IsInf and Range. These ops move or compare elements exactly,
so outputs must equal onnxruntime's bit for bit (NaN where it has NaN).

Also: a build only compiles the instantiations its models use (type reduction)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(31)


def _vi(name, arr):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype), np.shape(arr))


def one_node(op, feeds, consts=None, opset=17, inputs=None, out_type=None, **attrs):
    """A single-`op` model: `feeds` are run-time inputs, `consts` initializers (in that
    order unless `inputs` names them). Output types come from onnxruntime's run."""
    consts = consts or {}
    names = inputs if inputs is not None else list(feeds) + list(consts)
    node = helper.make_node(op, names, ["out"], **attrs)
    graph = helper.make_graph([node], "t", [_vi(k, v) for k, v in feeds.items()],
                              [helper.make_tensor_value_info("out", out_type or 0, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(model, feeds, rtol=0.0):
    """minirt's outputs equal onnxruntime's: same shape, same type, same values."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    for vi, inf in zip(model.graph.output, inferred.graph.output):
        if not vi.type.tensor_type.elem_type:
            vi.type.tensor_type.elem_type = inf.type.tensor_type.elem_type
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for vi, w in zip(model.graph.output, want):
        tt = vi.type.tensor_type
        tt.elem_type = helper.np_dtype_to_tensor_dtype(w.dtype)
        tt.shape.Clear()
        for d in w.shape:
            tt.shape.dim.add().dim_value = d
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if rtol:
            np.testing.assert_allclose(g, w, rtol=rtol)
        else:
            np.testing.assert_array_equal(g, w)
    return got


# --- Gather family ---------------------------------------------------------------

def test_gather_embedding_bert():
    """BERT's word embedding: [30522, 128] table, int64 ids [1, 128] fed at run time."""
    table = RNG.standard_normal((30522, 128)).astype(np.float32)
    ids = RNG.integers(0, 30522, (1, 128)).astype(np.int64)
    ids[0, :3] = [0, 30521, -1]  # the edges, and a negative id (counts from the end)
    check(one_node("Gather", {"ids": ids}, {"table": table}, inputs=["table", "ids"], axis=0), {"ids": ids})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_, np.uint8, np.int8, np.float16])
@pytest.mark.parametrize("tind", [np.int32, np.int64])
def test_gather_types(dtype, tind):
    data = (RNG.standard_normal((4, 6, 5)) * 10).astype(dtype)
    idx = np.array([[0, -1], [3, 2], [-6, 5]], tind)
    check(one_node("Gather", {"data": data, "idx": idx}, axis=1), {"data": data, "idx": idx})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_axes(axis):
    data = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    n = data.shape[axis]
    idx = np.array([n - 1, 0, -n, 1], np.int64)
    check(one_node("Gather", {"data": data, "idx": idx}, axis=axis), {"data": data, "idx": idx})


def test_gather_scalar_index_position_ids():
    """A 0-d index drops the axis (the [CLS] token's hidden state: x[:, 0])."""
    x = RNG.standard_normal((2, 128, 64)).astype(np.float32)
    check(one_node("Gather", {"x": x}, {"i": np.array(0, np.int64)}, axis=1), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    data = RNG.standard_normal((6, 7, 8)).astype(np.float32)
    shape = [5, 6, 4]
    idx = RNG.integers(-data.shape[axis], data.shape[axis], shape).astype(np.int64)
    check(one_node("GatherElements", {"data": data, "idx": idx}, axis=axis), {"data": data, "idx": idx})


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd(batch_dims):
    data = RNG.integers(-100, 100, (3, 4, 5, 6)).astype(np.int64)
    k = 2
    idx = np.stack([RNG.integers(-data.shape[batch_dims + j], data.shape[batch_dims + j], (3, 4, 7))
                    for j in range(k)], axis=-1).astype(np.int64)
    check(one_node("GatherND", {"data": data, "idx": idx}, batch_dims=batch_dims), {"data": data, "idx": idx})


def test_gather_out_of_range_run_time_index_gives_zeros():
    """onnxruntime fails the run; minirt cannot fail in run(), so it reads nothing
    outside the table and writes zeros for that row."""
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([1, 10, -11, 2], np.int64)
    m = one_node("Gather", {"ids": ids}, {"table": table}, inputs=["table", "ids"])
    m.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for d in (4, 4):
        m.graph.output[0].type.tensor_type.shape.dim.add().dim_value = d
    (got,) = testing.run_with_minirt(m, {"ids": ids})
    np.testing.assert_array_equal(got, np.stack([table[1], np.zeros(4), np.zeros(4), table[2]]).astype(np.float32))


# --- Where, Expand ---------------------------------------------------------------

def test_where_attention_mask():
    """A [1,1,1,128] key mask against [1,12,128,128] scores, a scalar fill."""
    mask = RNG.random((1, 1, 1, 128)) > 0.2
    scores = RNG.standard_normal((1, 12, 128, 128)).astype(np.float32)
    fill = np.array(-np.inf, np.float32)
    check(one_node("Where", {"mask": mask, "scores": scores}, {"fill": fill}), {"mask": mask, "scores": scores})


@pytest.mark.parametrize("shapes", [
    ((1, 12, 128, 128), (1, 12, 128, 128), (1, 12, 128, 128)),
    ((128, 128), (1, 12, 128, 128), ()),        # causal mask, scalar Y
    ((1, 1, 128, 1), (), (1, 12, 1, 128)),      # scalar X, every input broadcast
    ((3, 1, 5), (1, 4, 1), (3, 4, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_, np.float16])
def test_where_broadcast(shapes, dtype):
    c = np.asarray(RNG.random(shapes[0]) > 0.5)
    x = np.asarray((RNG.standard_normal(shapes[1]) * 5).astype(dtype))
    y = np.asarray((RNG.standard_normal(shapes[2]) * 5).astype(dtype))
    model = one_node("Where", {"c": c, "x": x, "y": y})
    if dtype == np.bool_:  # onnxruntime has no bool Where: numpy says what it is
        model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.BOOL
        for d in np.broadcast_shapes(c.shape, x.shape, y.shape):
            model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = d
        (got,) = testing.run_with_minirt(model, {"c": c, "x": x, "y": y})
        np.testing.assert_array_equal(got, np.where(c, x, y))
        return
    check(model, {"c": c, "x": x, "y": y})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("src,shape", [((1, 1, 128), [1, 12, 128, 128]), ((3, 1), [2, 3, 6]), ((4,), [4]),
                                       ((2, 1, 3), [1, 4, 1])])
def test_expand(dtype, src, shape):
    x = (RNG.standard_normal(src) * 5).astype(dtype)
    check(one_node("Expand", {"x": x}, {"shape": np.array(shape, np.int64)}), {"x": x})


# --- Cast ----------------------------------------------------------------------------

def _values(dtype, shape=(1, 12, 128)):
    """Values the conversion is defined on in both runtimes (in range of every target)."""
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(dtype, np.floating):
        v = RNG.standard_normal(shape) * 40
        v.flat[:4] = [0.0, -0.0, 127.9, -128.9]
        return v.astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)


PAIRS = [(np.bool_, np.float32), (np.float32, np.bool_), (np.int64, np.float32), (np.float32, np.int64),
         (np.int64, np.int32), (np.int32, np.int64), (np.int32, np.float32), (np.float32, np.int32),
         (np.float32, np.float16), (np.float16, np.float32), (np.float64, np.float32), (np.float32, np.float64),
         (np.uint8, np.float32), (np.float32, np.uint8), (np.int8, np.float32), (np.bool_, np.int64),
         (np.int64, np.bool_), (np.float16, np.int64), (np.int64, np.float16), (np.float64, np.float16),
         (np.float32, np.float32)]


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b in PAIRS])
def test_cast(src, dst):
    x = _values(src)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    check(one_node("Cast", {"x": x}, to=to, opset=19), {"x": x})


def test_cast_float16_every_value():
    """float32 -> float16 rounds to nearest even exactly like onnxruntime, through
    subnormals, overflow to Inf and NaN; float16 -> float32 is exact for all 65536."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    halves = bits.astype(np.uint16).view(np.float16)
    check(one_node("Cast", {"h": halves}, to=onnx.TensorProto.FLOAT), {"h": halves})
    # Every float16 value, the midpoints between neighbours (ties) and just beside them.
    f = halves.astype(np.float32)
    f = f[np.isfinite(f)]
    f.sort()
    mid = ((f[1:].astype(np.float64) + f[:-1]) / 2).astype(np.float32)
    x = np.concatenate([f, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
                        np.array([65504, 65519.99, 65520, 1e6, np.inf, -np.inf, np.nan, 1e-8, -3e-8], np.float32)])
    check(one_node("Cast", {"x": x}, to=onnx.TensorProto.FLOAT16), {"x": x})


def test_cast_float_to_narrow_ints_wraps_like_onnxruntime():
    """float -> int8/uint8/int16/uint16/uint32 goes through int64, as onnxruntime's and
    numpy's conversions do on these CPUs: out-of-range values wrap (-5.3 -> uint8 251)."""
    x = np.array([300.5, -300.5, 127.9, -128.9, -5.3, 70000.7, -1.0, 255.9], np.float32)
    for to in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16):
        check(one_node("Cast", {"x": x}, to=to), {"x": x})


def test_cast_float_to_int_undefined_values():
    """What C leaves undefined (NaN, Inf, beyond int64) minirt defines: NaN -> 0, others
    saturate at int64's range before narrowing."""
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 9.3e18], np.float32)
    m = one_node("Cast", {"x": x}, to=onnx.TensorProto.INT64, out_type=onnx.TensorProto.INT64)
    m.graph.output[0].type.tensor_type.shape.dim.add().dim_value = x.size
    (got,) = testing.run_with_minirt(m, {"x": x})
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    np.testing.assert_array_equal(got, np.array([0, big, small, big, small, big], np.int64))


def test_attention_mask_chain():
    """The BERT mask prologue as exporters write it: int64 mask -> float32 -> (1 - m) * -10000 + scores."""
    from onnx import TensorProto
    mask = (RNG.random((1, 1, 1, 128)) > 0.3).astype(np.int64)
    scores = RNG.standard_normal((1, 12, 128, 128)).astype(np.float32)
    nodes = [helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]),
             helper.make_node("Add", ["scores", "bias"], ["y"])]
    graph = helper.make_graph(nodes, "mask", [_vi("mask", mask), _vi("scores", scores)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(1, np.float32), "one"),
                               numpy_helper.from_array(np.array(-10000, np.float32), "big")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    check(model, {"mask": mask, "scores": scores})


# --- comparisons, logic, IsNaN/IsInf, Range -------------------------------------------

CMP_OPS = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", CMP_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("shapes", [((1, 12, 128, 128), (1, 12, 128, 128)), ((1, 12, 128, 128), (128,)),
                                    ((), (2, 64)), ((3, 1, 5), (1, 4, 1))])
def test_compare(op, dtype, shapes):
    a = RNG.integers(-3, 3, shapes[0]).astype(dtype)
    b = RNG.integers(-3, 3, shapes[1]).astype(dtype)
    if dtype == np.float32 and a.size > 4:
        a.flat[:2] = np.nan
    check(one_node(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_equal_int64_position_ids():
    """Equal on int64, as exporters write padding masks: ids == pad_id."""
    ids = RNG.integers(0, 4, (1, 128)).astype(np.int64)
    check(one_node("Equal", {"ids": ids}, {"pad": np.array(0, np.int64)}), {"ids": ids})


def test_equal_bool():
    a, b = RNG.random((4, 5)) > 0.5, RNG.random((5,)) > 0.5
    check(one_node("Equal", {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", [((12, 128, 128), (12, 128, 128)), ((1, 128, 128), (128, 1)), ((5,), ())])
def test_logic(op, shapes):
    a, b = np.asarray(RNG.random(shapes[0]) > 0.5), np.asarray(RNG.random(shapes[1]) > 0.5)
    check(one_node(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_not():
    a = RNG.random((12, 128)) > 0.5
    check(one_node("Not", {"a": a}), {"a": a})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_isnan_isinf(dtype):
    x = (RNG.standard_normal(64) * 10).astype(dtype)
    x[:6] = [np.nan, np.inf, -np.inf, 0, -0.0, np.finfo(dtype).max]
    check(one_node("IsNaN", {"x": x}, opset=20), {"x": x})
    for pos, neg in [(1, 1), (1, 0), (0, 1)]:
        check(one_node("IsInf", {"x": x}, opset=20, detect_positive=pos, detect_negative=neg), {"x": x})


@pytest.mark.parametrize("dtype,start,limit,delta", [(np.int64, 0, 128, 1), (np.int32, 10, -7, -3),
                                                    (np.float32, 0.5, 9.3, 0.7), (np.int64, 5, 5, 1)])
def test_range(dtype, start, limit, delta):
    """Range's bounds must be constants; its output, a graph output, is not folded away.
    minirt computes start + i * delta as the ONNX spec writes it; onnxruntime adds delta
    repeatedly, so float32 results differ by accumulated rounding (a few ulps)."""
    consts = {"s": np.array(start, dtype), "l": np.array(limit, dtype), "d": np.array(delta, dtype)}
    (got,) = check(one_node("Range", {}, consts), {}, rtol=1e-6 if dtype == np.float32 else 0.0)
    if dtype == np.float32:
        np.testing.assert_array_equal(got, np.float32(start) + np.arange(got.size, dtype=np.float32) * np.float32(delta))


# --- type reduction --------------------------------------------------------------------

def test_build_compiles_only_the_used_instantiation(tmp_path):
    """A model with one float32 Gather by int64 ids builds a library holding that one
    Gather object (the size-8-index instantiation of 4-byte elements), no other Gather
    instantiation, and none of the other typed kernels' objects."""
    from minibuild.pipeline import Options, run_build
    models = tmp_path / "models"
    models.mkdir()
    table = RNG.standard_normal((100, 16)).astype(np.float32)
    ids = np.zeros((1, 8), np.int64)
    m = one_node("Gather", {"ids": ids}, {"table": table}, inputs=["table", "ids"], axis=0,
                 out_type=onnx.TensorProto.FLOAT)
    for d in (1, 8, 16):
        m.graph.output[0].type.tensor_type.shape.dim.add().dim_value = d
    onnx.save(m, str(models / "embed.onnx"))
    out = tmp_path / "out"
    result = run_build(Options(models=models, out=out, platforms=["linux"], abis=["x86_64"]))
    entries = [(e.op, e.signatures) for e in result.scan.manifest.entries]
    assert entries == [("Gather", ["float32,int64"])], entries
    objs = sorted(p.name for p in (out / "build").rglob("obj/kernels/*.o"))
    assert objs == ["Gather__uint32_int64.o"], objs
    plan = (out / "build" / "plan.json").read_text()
    kernel_sources = {Path(o["source"]).name for t in json.loads(plan)["targets"] for o in t["objects"]
                      if "/kernels/" in o["source"]}
    assert "gather.c" in kernel_sources and not kernel_sources & {"where.c", "cast.c", "compare.c", "expand.c"}
    assert "-DMRT_KERNEL_SUFFIX=__uint32_int64" in plan or "MRT_KERNEL_SUFFIX=__uint32_int64" in plan
    # The model runs on the library that build made.
    import importlib
    import sys
    sys.path.insert(0, str(out / "linux" / "x86_64" / "python"))
    try:
        minirt = importlib.import_module("minirt")
        sess = minirt.InferenceSession(str(out / "models" / "embed.mrt"))
        ids = np.array([[3, 1, 4, 1, 5, 9, 2, -6]], np.int64)
        (got,) = sess.run(None, {"ids": ids})
        np.testing.assert_array_equal(got, table[ids])
    finally:
        sys.path.pop(0)

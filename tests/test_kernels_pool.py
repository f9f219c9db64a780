"""Windowed pooling against onnxruntime: MaxPool on float32, uint8 and int8 (with and
without Indices, both storage orders) and float AveragePool, over the geometries the
kernels take apart -- the stride-2 width pass (even lanes by shuffle), stride 1
(sliding op; float stride 1 in H and W takes the flat form), the scalar generic
stride, the bordered row's leading and end padding, ceil_mode windows that pass the
end padding, dilations, auto_pad, 1-D and 3-D -- on widths whose outputs leave every
vector tail (8 floats, 16 bytes a vector). Max is compared exactly; averages within
the float tolerance. The same models run under qemu on aarch64 and armv7."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import models

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(4321)

# (input shape, attributes): output widths 34, 35, 36, 33, 18, 24 ... around 8 and 16.
GEOMETRIES = [
    ((1, 3, 9, 67), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 8, 70), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 7, 71), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 7, 71), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 6, 37), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 2, 9, 41), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 2, 11, 53), dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 2, 10, 50), dict(kernel_shape=[5, 5], strides=[2, 2], dilations=[1, 3], pads=[2, 4, 1, 3])),
    ((1, 2, 7, 36), dict(kernel_shape=[3, 4], strides=[2, 2], pads=[0, 3, 2, 2], ceil_mode=1)),
    ((1, 2, 8, 66), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 8, 65), dict(kernel_shape=[4, 4], strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 8, 47), dict(kernel_shape=[3, 3], strides=[3, 3], auto_pad="VALID")),
    ((2, 3, 61), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ((1, 2, 77), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 5, 6, 41), dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[0, 1, 1, 1, 0, 1])),
    ((1, 4, 3, 5), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
]
IDS = [f"{'x'.join(map(str, s))}-" + "-".join(f"{k}{v}" for k, v in a.items()).replace(" ", "") for s, a in GEOMETRIES]


def pool_model(op, x, n_out=1, opset=12, **attrs):
    dt = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["x"], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", dt, x.shape)],
                              [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.INT64 if i else dt, None)
                               for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return models.with_output_shapes(model)


def pool_input(shape, dtype):
    if dtype == np.float32:
        return RNG.standard_normal(shape).astype(np.float32)
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)
    # Runs of the type's lowest value: windows whose max is the identity (Indices
    # names the first tap, as onnxruntime does).
    x.reshape(-1)[: x.size // 4] = info.min
    return x


def check(model, feeds, exact=True):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8], ids=["f32", "u8", "s8"])
@pytest.mark.parametrize("shape,attrs", GEOMETRIES, ids=IDS)
def test_maxpool(shape, attrs, dtype):
    x = pool_input(shape, dtype)
    check(pool_model("MaxPool", x, **attrs), {"x": x})


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8], ids=["f32", "u8", "s8"])
@pytest.mark.parametrize("shape,attrs", [g for g in GEOMETRIES if len(g[0]) == 4 and "dilations" not in g[1]],
                         ids=[i for i, g in zip(IDS, GEOMETRIES) if len(g[0]) == 4 and "dilations" not in g[1]])
def test_maxpool_indices(shape, attrs, dtype, storage_order):
    x = pool_input(shape, dtype)
    check(pool_model("MaxPool", x, n_out=2, storage_order=storage_order, **attrs), {"x": x})


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape,attrs", GEOMETRIES, ids=IDS)
def test_averagepool(shape, attrs, include_pad):
    x = pool_input(shape, np.float32)
    check(pool_model("AveragePool", x, opset=19, count_include_pad=include_pad, **attrs), {"x": x}, exact=False)


# GlobalAveragePool on the planes of a squeeze-excitation block (7x7, 14x14, 56x56: the
# vector sums' 32-float body, 8-float steps and scalar tail), with many channels so two
# threads split them, against onnxruntime; two threads give the same bytes as one.
@pytest.mark.parametrize("shape", [(1, 1152, 7, 7), (1, 96, 14, 14), (2, 24, 56, 56), (1, 3, 37), (1, 5, 1, 7)])
def test_global_average_pool_planes(shape):
    x = RNG.standard_normal(shape).astype(np.float32) + 0.25
    model = pool_model("GlobalAveragePool", x, opset=1)
    check(model, {"x": x}, exact=False)
    data, _ = testing.convert_model(model, {"x": x}, [])
    import minirt  # on sys.path once run_with_minirt ran
    outs = []
    for threads in (1, 2):
        so = minirt.SessionOptions()
        so.intra_op_num_threads = threads
        with minirt.InferenceSession(data, sess_options=so) as sess:
            outs.append(sess.run(None, {"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_tune_size_pools_run_the_separable_form(tmp_path):
    """--tune size leaves the flat form (stride 1 in H and W, float) out: those pools run
    the separable form there, and still match onnxruntime."""
    import json

    from minibuild import cli, toolchain
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    cases = [("max_same", "MaxPool", (1, 4, 13, 17), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
             ("avg_same", "AveragePool", (1, 4, 13, 17), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
             ("avg_plane", "AveragePool", (1, 2, 9, 9), dict(kernel_shape=[9, 9], count_include_pad=1))]
    for name, op, shape, attrs in cases:
        x = pool_input(shape, np.float32)
        onnx.save(pool_model(op, x, opset=19 if op == "AveragePool" else 12, **attrs), models_dir / f"{name}.onnx")
    out = tmp_path / "out"
    assert cli.main(["--models", str(models_dir), "--out", str(out), "--abi", toolchain.host_abi(),
                     "--tune", "size"]) == 0
    assert "#define MRT_TUNE_SIZE 1" in (out / "build" / "gen" / "config.h").read_text()
    report = tmp_path / "verify.json"
    assert cli.main(["verify", "--models", str(models_dir), "--out", str(out), "--json", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert len(doc["models"]) == 3 and all(o["ok"] for m in doc["models"] for o in m["outputs"])


# --- the NEON (aarch64) and portable-vector (armv7) builds under qemu ---------------------------

QEMU_GEOMETRIES = [GEOMETRIES[i] for i in (0, 1, 3, 4, 5, 6, 9, 13, 14)]


def arm_pool_model():
    """Every QEMU_GEOMETRIES pool on each element type (and float AveragePool both ways,
    MaxPool with Indices), one input per node; output shapes from onnxruntime."""
    nodes, feeds, outs = [], {}, []
    for g, (shape, attrs) in enumerate(QEMU_GEOMETRIES):
        for dt, tag in ((np.float32, "f"), (np.uint8, "u"), (np.int8, "s")):
            x = f"x{tag}{g}"
            feeds[x] = pool_input(shape, dt)
            nodes.append(helper.make_node("MaxPool", [x], [f"max_{tag}{g}"], **attrs))
            outs.append(f"max_{tag}{g}")
            if len(shape) == 4 and "dilations" not in attrs and g % 2 == 0:
                nodes.append(helper.make_node("MaxPool", [x], [f"maxv_{tag}{g}", f"maxi_{tag}{g}"],
                                              storage_order=g // 2 % 2, **attrs))
                outs += [f"maxv_{tag}{g}", f"maxi_{tag}{g}"]
        for inc in (0, 1):
            nodes.append(helper.make_node("AveragePool", [f"xf{g}"], [f"avg{inc}_{g}"], count_include_pad=inc, **attrs))
            outs.append(f"avg{inc}_{g}")
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]

    def model(outputs):
        m = helper.make_model(helper.make_graph(nodes, "arm_pools", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 9
        return m

    def elem(o):
        tag = o.split("_")[1][0] if o.startswith("max") else "f"
        return (onnx.TensorProto.INT64 if o.startswith("maxi") else
                {"f": onnx.TensorProto.FLOAT, "u": onnx.TensorProto.UINT8, "s": onnx.TensorProto.INT8}[tag])

    probe = model([helper.make_tensor_value_info(o, elem(o), None) for o in outs])
    refs = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    typed = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape)
             for o, r in zip(outs, refs)]
    return model(typed), feeds, refs


@pytest.fixture(scope="module")
def arm_pools(tmp_path_factory):
    from test_android import qemu_runners
    model, feeds, refs = arm_pool_model()
    mrt, runners = qemu_runners(tmp_path_factory.mktemp("arm-pools"), "pools", model)
    return model, feeds, refs, mrt, runners


@pytest.mark.parametrize("arch", ["qemu-aarch64", "qemu-armv7"])
def test_pools_under_qemu(arm_pools, arch, tmp_path):
    from test_android import run_under_qemu
    model, feeds, refs, mrt, runners = arm_pools
    raw = run_under_qemu(arch, runners[arch], mrt, [feeds[i.name] for i in model.graph.input], tmp_path)
    assert len(raw) == len(refs)
    for o, r, want in zip(model.graph.output, raw, refs):
        got = np.frombuffer(r, dtype=want.dtype).reshape(want.shape)
        if o.name.startswith("avg"):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{arch} {o.name}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{arch} {o.name}")

"""Models as the exporters write them: weights in external data files (checked to
stay inside the models folder), every opset from 7 to the newest onnx knows, and
the real cause when static shapes cannot be resolved. Also a seeded fuzz of the
scan over mutated protobufs and external-data tables."""

from __future__ import annotations

import os
import random
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import registry as registry_mod, scan
from minibuild.errors import MinibuildError, ModelError

REG = registry_mod.load()
NEWEST = onnx.defs.onnx_opset_version()


# --- models made here -----------------------------------------------------------------

def conv_relu_gemm(opset: int = 13, seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> Gemm on a 1x3x8x8 image: weights big enough to go
    to external data, ops every opset from 7 on has."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.weight"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv.bias"),
             numpy_helper.from_array((rng.standard_normal((5, 4 * 8 * 8)) * 0.1).astype(np.float32), "fc.weight"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc.bias")]
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "crg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset <= 15 else 10
    onnx.checker.check_model(model)
    return model


def rewrites_model(seed: int = 0) -> onnx.ModelProto:
    """One of each pattern the optimiser rewrites: Conv+BatchNormalization, per-channel
    Mul/Add after Conv, Clip with constant bounds, Dropout, Identity, Sum, a Shape ->
    Reshape chain, Gemm+Relu."""
    rng = np.random.default_rng(seed)
    c = 4
    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (f(c, 3, 3, 3), "w"), (f(c), "b"), (np.abs(f(c)) + 0.5, "scale"), (f(c), "bias"), (f(c), "mean"),
        (np.abs(f(c)) + 0.5, "var"), (f(1, c, 1, 1), "mul"), (f(1, c, 1, 1), "add"), (np.array(0, np.float32), "lo"),
        (np.array(6, np.float32), "hi"), (f(3, c * 16), "fw"), (np.array([1, -1], np.int64), "flat")]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Mul", ["bn", "mul"], ["m1"]),
             helper.make_node("Add", ["m1", "add"], ["a1"]),
             helper.make_node("Clip", ["a1", "lo", "hi"], ["cl"]),
             helper.make_node("Dropout", ["cl"], ["dr"]),
             helper.make_node("Identity", ["dr"], ["id"]),
             helper.make_node("Sum", ["id", "cl", "dr"], ["s"]),
             helper.make_node("Shape", ["s"], ["shp"]),
             helper.make_node("Reshape", ["s", "flat"], ["r"]),
             helper.make_node("Gemm", ["r", "fw"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "rewrites", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def save_external(model: onnx.ModelProto, path: Path, location: str | None = None) -> Path:
    """Save as torch.onnx.export does: every tensor in one NAME.onnx.data beside the model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location or path.name + ".data", size_threshold=0)
    return path


def retarget(path: Path, location: str, tensor: str | None = None, **fields) -> onnx.ModelProto:
    """Rewrite a saved model's external-data table as a hostile file would have it
    (onnx.save_model itself refuses to write such locations)."""
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL or (tensor and t.name != tensor):
            continue
        info = {e.key: e.value for e in t.external_data}
        info["location"] = location
        info.update({k: str(v) for k, v in fields.items()})
        del t.external_data[:]
        for k, v in info.items():
            t.external_data.add(key=k, value=v)
    path.write_bytes(model.SerializeToString())
    return model


_OPENED: list | None = None


def _audit(event, args):
    if _OPENED is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@contextmanager
def opened_files():
    """Every file Python opens (builtins.open, io.open, os.open) inside the block."""
    global _OPENED
    _OPENED = seen = []
    try:
        yield seen
    finally:
        _OPENED = None


def assert_nothing_opened_under(seen: list, folder: Path):
    folder = os.path.realpath(folder)
    outside = [p for p in seen if os.path.commonpath([p, folder]) == folder]
    assert not outside, f"opened outside the models folder: {outside}"


# --- external data --------------------------------------------------------------------

def test_external_data_loads_and_the_data_file_is_no_model(tmp_path):
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "crg.onnx")
    assert (models / "crg.onnx.data").is_file()
    assert scan.find_models(models) == [models / "crg.onnx"]
    sm = scan.scan_model(models / "crg.onnx", REG, root=models)
    (fc,) = [t for t in sm.graph.model.graph.initializer if t.name == "fc.weight"]
    assert fc.data_location == TensorProto.DEFAULT and not fc.external_data  # read in
    np.testing.assert_array_equal(numpy_helper.to_array(fc), numpy_helper.to_array(conv_relu_gemm().graph.initializer[2]))
    assert {n.op_type for n in sm.graph.nodes} >= {"Gemm"}
    # Default root: the model's own folder.
    assert scan.scan_model(models / "crg.onnx", REG).sha256 == sm.sha256


def test_digest_covers_external_weights(tmp_path):
    a = save_external(conv_relu_gemm(seed=0), tmp_path / "a" / "m.onnx")
    b = save_external(conv_relu_gemm(seed=1), tmp_path / "b" / "m.onnx")
    assert a.read_bytes() == b.read_bytes()  # the same table, different weights
    assert scan.read_model(a)[1] != scan.read_model(b)[1]


def test_subfolder_model_reads_data_beside_itself(tmp_path):
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "vision" / "crg.onnx")
    (models / "crg.onnx.data").write_bytes(b"\0" * 16)  # a decoy at the top: must not be read
    assert scan.find_models(models) == [models / "vision" / "crg.onnx"]
    with opened_files() as seen:
        scan.scan_model(models / "vision" / "crg.onnx", REG, root=models)
    assert str((models / "vision" / "crg.onnx.data").resolve()) in seen
    assert str((models / "crg.onnx.data").resolve()) not in seen


def test_symlink_inside_the_folder_is_allowed(tmp_path):
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "crg.onnx")
    (models / "blobs").mkdir()
    os.rename(models / "crg.onnx.data", models / "blobs" / "weights.bin")
    os.symlink("blobs/weights.bin", models / "crg.onnx.data")
    scan.scan_model(models / "crg.onnx", REG, root=models)


def _hostile(tmp_path, kind):
    """A models folder whose model points its weights at a valid data file outside it
    (a loader that followed the location would succeed: the scan must fail instead)."""
    models, outside = tmp_path / "models", tmp_path / "outside"
    save_external(conv_relu_gemm(), models / "crg.onnx")
    outside.mkdir()
    os.rename(models / "crg.onnx.data", outside / "secret.data")
    if kind == "absolute":
        location = str(outside / "secret.data")
    elif kind == "dotdot":
        location = "../outside/secret.data"
    elif kind == "dotdot-inside":
        location = "sub/../../outside/secret.data"
    elif kind == "backslash":
        location = "..\\outside\\secret.data"
    elif kind == "symlink":
        os.symlink(outside / "secret.data", models / "crg.onnx.data")
        location = "crg.onnx.data"
    elif kind == "symlinked-folder":
        os.symlink(outside, models / "blobs")
        location = "blobs/secret.data"
    retarget(models / "crg.onnx", location)
    return models, outside, location


@pytest.mark.parametrize("kind,why", [
    ("absolute", "is an absolute path"),
    ("dotdot", "goes up a folder ('..')"),
    ("dotdot-inside", "goes up a folder ('..')"),
    ("backslash", "goes up a folder ('..')"),
    ("symlink", "outside the models folder"),
    ("symlinked-folder", "outside the models folder"),
])
def test_locations_leaving_the_models_folder_are_refused(tmp_path, kind, why):
    models, outside, location = _hostile(tmp_path, kind)
    with opened_files() as seen, pytest.raises(ModelError) as err:
        scan.scan_model(models / "crg.onnx", REG, root=models)
    msg = str(err.value)
    assert str(models / "crg.onnx") in msg
    assert "tensor 'conv.weight'" in msg
    assert f"location '{location}'" in msg
    assert why in msg
    assert_nothing_opened_under(seen, outside)


def test_symlink_out_of_a_subfolder_but_inside_the_root_is_allowed(tmp_path):
    """The models folder is the root: a subfolder model may share data kept elsewhere in it."""
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "a" / "crg.onnx")
    (models / "shared").mkdir()
    os.rename(models / "a" / "crg.onnx.data", models / "shared" / "w.bin")
    os.symlink(models / "shared" / "w.bin", models / "a" / "crg.onnx.data")
    scan.scan_model(models / "a" / "crg.onnx", REG, root=models)
    # Without the root, the model's own folder is the root: refused.
    with pytest.raises(ModelError, match="outside the models folder"):
        scan.scan_model(models / "a" / "crg.onnx", REG)


@pytest.mark.parametrize("change,why", [
    (dict(location="missing.data"), "does not exist"),
    (dict(location="crg.onnx.data", offset=10**6), "past the end of the file"),
    (dict(location="crg.onnx.data", tensor="fc.weight", length=12), "holds 12 bytes but the tensor needs 5120"),
    (dict(location="crg.onnx.data", offset="abc"), "has offset 'abc': not a byte count"),
    (dict(location="crg.onnx.data", offset=-4), "has offset '-4': not a byte count"),
    (dict(location=""), "has no location"),
    (dict(location="."), "is not a regular file"),
])
def test_bad_external_data_tables(tmp_path, change, why):
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "crg.onnx")
    retarget(models / "crg.onnx", **change)
    with pytest.raises(ModelError) as err:
        scan.scan_model(models / "crg.onnx", REG, root=models)
    assert why in str(err.value)
    assert "tensor '" in str(err.value)


def test_truncated_data_file(tmp_path):
    models = tmp_path / "models"
    save_external(conv_relu_gemm(), models / "crg.onnx")
    data = models / "crg.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelError, match=r"tensor '.*': external data location 'crg.onnx.data' .*past the end"):
        scan.scan_model(models / "crg.onnx", REG)


# --- opsets ------------------------------------------------------------------------------

def opset_model(opset: int) -> onnx.ModelProto:
    """What exporters write at each opset: ReduceMean's axes and Split's sizes move from
    attributes to inputs (13, 18), Split gets num_outputs (18), Gelu appears (20)."""
    rng = np.random.default_rng(opset)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "fw"),
             numpy_helper.from_array(np.zeros(5, np.float32), "fb")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"])]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        nodes.append(helper.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0))
    nodes.append(helper.make_node("Gemm", ["m", "fw", "fb"], ["g"], transB=1))
    if opset >= 18:
        nodes.append(helper.make_node("Split", ["g"], ["s1", "s2"], axis=1, num_outputs=2))
    elif opset >= 13:
        inits.append(numpy_helper.from_array(np.array([3, 2], np.int64), "split"))
        nodes.append(helper.make_node("Split", ["g", "split"], ["s1", "s2"], axis=1))
    else:
        nodes.append(helper.make_node("Split", ["g"], ["s1", "s2"], axis=1, split=[3, 2]))
    outs = ["s1", "s2"]
    if opset >= 20:
        nodes.append(helper.make_node("Gelu", ["s1"], ["gelu"]))
        outs = ["gelu", "s2"]
    graph = helper.make_graph(nodes, "opsets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 2] if o == "s2" else [1, 3])
                               for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", range(7, NEWEST + 1))
def test_every_opset_from_7_scans(tmp_path, opset):
    path = save_external(opset_model(opset), tmp_path / f"m{opset}.onnx")
    sm = scan.scan_model(path, REG)
    ops = {n.op_type: scan.optimize.since_version(sm.graph, n) for n in sm.graph.nodes}
    assert ops["ReduceMean"] == (18 if opset >= 18 else 13 if opset >= 13 else 11 if opset >= 11 else 1)
    assert ("Gelu" in ops) == (opset >= 20)
    needs = scan.needs(sm, REG)
    assert all(n.dtype == "float32" for n in needs)


def test_opset_newer_than_onnx_knows_is_refused(tmp_path):
    m = conv_relu_gemm(opset=NEWEST)
    m.opset_import[0].version = NEWEST + 1
    path = tmp_path / "new.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ModelError, match=rf"imports ai.onnx opset {NEWEST + 1}, but the installed onnx .* knows "
                                         rf"opsets 1 to {NEWEST}"):
        scan.scan_model(path, REG)


def test_local_functions_are_inlined(tmp_path):
    """Older torch exporters write modules as model-local functions."""
    fn = helper.make_function("pkg.mine", "Block", ["a"], ["b"],
                              [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Neg", ["t"], ["b"])],
                              [helper.make_opsetid("", 13)])
    graph = helper.make_graph([helper.make_node("Block", ["x"], ["y"], domain="pkg.mine")], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg.mine", 1)],
                          functions=[fn])
    path = tmp_path / "f.onnx"
    onnx.save(m, str(path))
    sm = scan.scan_model(path, REG)
    assert [n.op_type for n in sm.graph.nodes] == ["Relu", "Neg"]


# --- the real cause of missing static shapes ---------------------------------------------

def _residual_net() -> onnx.ModelProto:
    """resnet18's pattern, small: conv-relu, conv-relu, residual Add, global pool, Gemm."""
    import models
    b = models._Builder(3, 13)
    y = b.op("Relu", [b.conv("x", 3, 8, 3)])
    z = b.op("Relu", [b.conv(y, 8, 8, 3)])
    y = b.op("Add", [y, z])
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    w = b.const((b.rng.standard_normal((10, 8)) * 0.3).astype(np.float32), "fc_w")
    y = b.op("Gemm", [y, w], transB=1)
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])], y, [1, 10], "resnet_like")


def test_qoperator_model_names_the_contrib_op_not_the_input_sizes(tmp_path):
    quant = pytest.importorskip("onnxruntime.quantization")

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)}
                               for i in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    f32 = tmp_path / "f32.onnx"
    onnx.save(_residual_net(), str(f32))
    (tmp_path / "models").mkdir()
    q = tmp_path / "models" / "resnet_qop.onnx"
    quant.quantize_static(str(f32), str(q), Reader(), quant_format=quant.QuantFormat.QOperator)
    # minibuild gives the QOperator ops onnx has no schema for their shapes: the model scans
    sm = scan.scan_model(q, REG)
    assert any(n.domain == "com.microsoft" and n.op_type == "QLinearAdd" for n in sm.graph.nodes)
    # a contrib op minibuild knows no shapes for is named as the cause, not the input sizes
    graph = helper.make_graph([helper.make_node("FusedMatMul", ["x", "w"], ["m"], name="fmm", domain="com.microsoft"),
                               helper.make_node("Relu", ["m"], ["y"], name="relu")], "ms",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.ones((4, 3), np.float32), "w")])
    path = tmp_path / "ms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]),
              str(path))
    with pytest.raises(ModelError) as err:
        scan.scan_model(path, REG)
    msg = str(err.value)
    assert "--fix-dim" not in msg and "input sizes" not in msg
    assert "node 'fmm' (com.microsoft.FusedMatMul, domain 'com.microsoft') is an operator onnx has no schema for" in msg
    assert "minirt does not support this operator" in msg and "QLinearAdd" in msg and "QuantFormat.QDQ" in msg


def test_data_dependent_shape_names_the_node(tmp_path):
    graph = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"], name="where"),
                               helper.make_node("Cast", ["nz"], ["y"], name="cast", to=TensorProto.FLOAT)], "dd",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None])])
    path = tmp_path / "dd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(ModelError, match=r"node 'where' \(ai.onnx.NonZero\) gives output 'nz' a shape that depends on "
                                         r"the values of 'x', which are known only at run time"):
        scan.scan_model(path, REG)


# --- torch's default exporter -------------------------------------------------------------

def test_torch_default_export_scans(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")  # the default (dynamo) exporter needs it

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 10)

        def forward(self, x):
            y = torch.relu(self.conv(x)).mean(dim=(2, 3))
            return torch.nn.functional.gelu(self.fc(y))

    models = tmp_path / "models"
    models.mkdir()
    t0 = time.monotonic()
    torch.onnx.export(Net().eval(), (torch.randn(1, 3, 16, 16),), str(models / "net.onnx"))
    print(f"torch.onnx.export: {time.monotonic() - t0:.1f}s")
    assert (models / "net.onnx.data").is_file()  # the default writes external data
    assert scan.find_models(models) == [models / "net.onnx"]
    sm = scan.scan_model(models / "net.onnx", REG, root=models)
    ops = {n.op_type: scan.optimize.since_version(sm.graph, n) for n in sm.graph.nodes}
    assert sm.graph.opsets[""] >= 18
    assert ops["ReduceMean"] == 18 and ops["Gemm"] >= 13
    assert sm.graph.value_info[sm.graph.outputs[0].name][1] == (1, 10)


# --- end to end ----------------------------------------------------------------------------

def test_external_data_model_builds_and_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from conftest import build
    from minibuild.verify import import_minirt
    models = tmp_path / "models"
    save_external(conv_relu_gemm(opset=17), models / "crg.onnx")
    out = tmp_path / "out"
    result = build(models, out)
    minirt = import_minirt(out)
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = minirt.InferenceSession(result.model_files["crg"])
    try:
        (got,) = sess.run(None, {"x": x})
    finally:
        sess.close()
    (ref,) = ort.InferenceSession(str(models / "crg.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


# --- fuzz ------------------------------------------------------------------------------------

_LOCATIONS = ["../x.data", "/etc/passwd", "missing.data", "", ".", "crg.onnx", "a/../../x", "..\\x", "C:\\x",
              "crg.onnx.data\0", "sub/", "crg.onnx.data"]


def _mutations(rng: random.Random, model_bytes: bytes, data: bytes, table: onnx.ModelProto):
    """(model bytes, data bytes) pairs: byte flips, truncations, insertions, bad tables."""
    kind = rng.randrange(7)
    if kind == 0:  # flip bytes of the protobuf
        b = bytearray(model_bytes)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), data
    if kind == 1:  # truncate the protobuf
        return model_bytes[:rng.randrange(len(model_bytes))], data
    if kind == 2:  # insert junk
        i = rng.randrange(len(model_bytes))
        return model_bytes[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 6))) + model_bytes[i:], data
    if kind == 3:  # truncate or flip the data file
        if rng.random() < 0.5:
            return model_bytes, data[:rng.randrange(len(data) + 1)]
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 0xFF
        return model_bytes, bytes(b)
    m = onnx.ModelProto()
    m.CopyFrom(table)
    tensors = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    t = rng.choice(tensors)
    info = {e.key: e.value for e in t.external_data}
    if kind == 6:  # a structurally valid protobuf with one field changed
        return _mutate_graph(rng, m).SerializeToString(), data
    if kind == 4:  # wrong offsets, lengths, locations
        field = rng.choice(["offset", "length", "location", "drop"])
        if field == "location":
            info["location"] = rng.choice(_LOCATIONS)
        elif field == "drop":
            info.pop(rng.choice(sorted(info)))
        else:
            info[field] = rng.choice([str(rng.randrange(-8, 1 << 20)), str(1 << 70), "x", "", "1e3", " 4"])
        del t.external_data[:]
        for k, v in info.items():
            t.external_data.add(key=k, value=v)
    else:  # dims or type that no longer fit the bytes
        if rng.random() < 0.5:
            if not t.dims:
                t.dims.append(1)
            t.dims[rng.randrange(len(t.dims))] = rng.choice([0, 1, -1, 7, 1 << 40])
        else:
            t.data_type = rng.choice([0, 8, 2, 7, 10, 22, 99])
    return m.SerializeToString(), data


_OPS = ["Relu", "Conv", "Gemm", "Flatten", "Add", "BatchNormalization", "Clip", "Identity", "Dropout", "Sum",
        "Reshape", "MaxPool", "NoSuchOp"]


def _mutate_graph(rng: random.Random, m: onnx.ModelProto) -> onnx.ModelProto:
    """Change one field the way a buggy exporter might: an attribute, a dim, an op
    type, a wire between nodes, the opset."""
    g = m.graph
    node = rng.choice(g.node)
    what = rng.randrange(6)
    if what == 0 and node.attribute:
        a = rng.choice(node.attribute)
        if a.ints:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([-1, 0, 2, 9, 1 << 31])
        else:
            a.i = rng.choice([-2, 0, 3, 1 << 40])
    elif what == 1:
        d = g.input[0].type.tensor_type.shape.dim
        d[rng.randrange(len(d))].dim_value = rng.choice([0, 1, 2, 7, 1 << 33])
    elif what == 2:
        node.op_type = rng.choice(_OPS)
    elif what == 3:
        names = [i.name for i in g.input] + [t.name for t in g.initializer] + [o for n in g.node for o in n.output]
        if node.input:
            node.input[rng.randrange(len(node.input))] = rng.choice(names + ["", "nowhere"])
    elif what == 4:
        m.opset_import[0].version = rng.choice([1, 5, 6, 7, 9, 11, 13, 18, 20, NEWEST, NEWEST + 1, 0, 1000])
    else:
        node.domain = rng.choice(["com.microsoft", "ai.onnx", "ai.minibuild", "ai.onnx.ml", "x"])
    return m


@pytest.mark.parametrize("seed_model,seed", [(conv_relu_gemm, 20240601), (rewrites_model, 7)])
def test_fuzz_scan_ends_in_minibuild_error_or_success(tmp_path, seed_model, seed):
    """300 seeded mutations of each seed model (about a second)."""
    models = tmp_path / "models"
    save_external(seed_model(), models / "crg.onnx")
    (models / "sub").mkdir()
    model_bytes = (models / "crg.onnx").read_bytes()
    data = (models / "crg.onnx.data").read_bytes()
    table = onnx.load(str(models / "crg.onnx"), load_external_data=False)
    (tmp_path / "x.data").write_bytes(data)  # what '../x.data' would reach: must never be read
    rng = random.Random(seed)
    outcomes = {"ok": 0, "error": 0}
    t0 = time.monotonic()
    with opened_files() as seen:
        for i in range(300):
            mb, db = _mutations(rng, model_bytes, data, table)
            (models / "crg.onnx").write_bytes(mb)
            (models / "crg.onnx.data").write_bytes(db)
            try:
                scan.scan_model(models / "crg.onnx", REG, root=models)
                outcomes["ok"] += 1
            except MinibuildError as e:
                assert str(e).strip(), f"mutation {i}: empty message"
                outcomes["error"] += 1
            except Exception as e:  # noqa: BLE001 - the point of the test
                (tmp_path / "crash.onnx").write_bytes(mb)
                raise AssertionError(f"mutation {i}: {type(e).__name__}: {e} (input kept in {tmp_path})") from e
    print(f"fuzz: 300 mutations in {time.monotonic() - t0:.1f}s: {outcomes}")
    assert outcomes["error"] > 100 and outcomes["ok"] > 10  # the mutations reach the checks, and past them
    models_real = os.path.realpath(models)
    strays = {p for p in seen if os.path.commonpath([p, models_real]) != models_real
              and os.path.commonpath([p, os.path.realpath(tmp_path)]) == os.path.realpath(tmp_path)}
    assert not strays, strays

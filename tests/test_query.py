"""`minibuild query`: provenance from the manifest (why), a model's kernels with their
bytes (deps), a build's objects (kernels); text, JSON and graphviz output."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import cli


def _conv_bn_relu(name: str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    for k, v in (("s", 1.5), ("b", 0.1), ("m", 0.2), ("v", 0.9)):
        inits.append(numpy_helper.from_array(np.full(4, v, np.float32), k))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("query") / "models"
    d.mkdir()
    onnx.save(_conv_bn_relu("net"), d / "net.onnx")
    return d


def _run(capsys, *argv) -> tuple[int, str]:
    rc = cli.main(["query", *map(str, argv)])
    return rc, capsys.readouterr().out


def test_why_names_the_fused_nodes_and_the_rewrites(models_dir, capsys):
    rc, text = _run(capsys, "why", "FusedConv", "--models", models_dir)
    assert rc == 0
    assert "ai.minibuild.FusedConv opset 1 (float32): model net, node conv" in text
    assert "from BatchNormalization bn (BatchNormalization folded into Conv)" in text
    assert "from Relu relu (Conv + Relu fused into FusedConv)" in text
    rc, out = _run(capsys, "why", "ai.minibuild.FusedConv", "--models", models_dir, "--output", "json")
    (use,) = json.loads(out)
    assert use["model"] == "net" and use["node"] == "conv"
    assert {m["node"] for m in use["made_by"]} == {"Conv conv", "BatchNormalization bn", "Relu relu"}


def test_why_an_op_that_was_fused_away_names_where_it_went(models_dir, capsys):
    rc, text = _run(capsys, "why", "BatchNormalization", "--models", models_dir)
    assert rc == 0 and text.startswith("not a kernel of this build")
    assert "node conv" in text


def test_why_an_op_no_model_uses_fails_with_the_ops_they_use(models_dir, capsys):
    assert cli.main(["query", "why", "Cos", "--models", str(models_dir)]) == 1
    err = capsys.readouterr().err
    assert "no node of these models needs Cos" in err and "ai.onnx.GlobalAveragePool" in err


def test_why_filters_by_type(models_dir, capsys):
    assert cli.main(["query", "why", "FusedConv", "--type", "int8", "--models", str(models_dir)]) == 1
    assert "with type int8" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz (Debian: graphviz) is not installed")
def test_dot_output_is_read_by_graphviz(models_dir, capsys, tmp_path):
    rc, dot = _run(capsys, "why", "FusedConv", "--models", models_dir, "--output", "dot")
    assert rc == 0
    svg = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=True).stdout
    assert "<svg" in svg and "net: conv" in svg and "BatchNormalization folded into Conv" in svg


def test_deps_and_kernels_read_the_build(models_dir, capsys, tmp_path):
    out = tmp_path / "out"
    assert cli.main(["--models", str(models_dir), "--out", str(out), "--abi", "x86_64"]) == 0
    capsys.readouterr()
    report = json.loads((out / "size_report.json").read_text())
    (artifact,) = report["artifacts"]
    rc, text = _run(capsys, "deps", "net", "--models", models_dir, "--out", out, "--output", "json")
    rows = {r["op"]: r for r in json.loads(text)}
    assert set(rows) == {"ai.minibuild.FusedConv", "ai.onnx.GlobalAveragePool"}
    gap = next(o for o in artifact["by_op"] if o["op"] == "ai.onnx.GlobalAveragePool")
    assert rows["ai.onnx.GlobalAveragePool"]["artifacts"]["linux-x86_64"]["bytes"] == gap["bytes"] > 0
    assert rows["ai.minibuild.FusedConv"]["artifacts"]["linux-x86_64"]["marginal_bytes"] > 10000  # the conv support units
    rc, text = _run(capsys, "kernels", "--out", out)
    assert rc == 0
    listed = {line.split()[-1] for line in text.splitlines() if line.strip()}
    assert {"support/conv", "support/gemm"} <= listed
    assert sum(int(line.split()[1]) for line in text.splitlines()) == sum(c["bytes"] for c in artifact["components"])
    assert cli.main(["query", "deps", "nope", "--models", str(models_dir)]) == 1
    assert "models: net" in capsys.readouterr().err


def test_rdeps_of_a_support_unit_and_of_a_kernel(models_dir, capsys, tmp_path):
    rc, text = _run(capsys, "rdeps", "gemm", "--models", models_dir)
    assert rc == 0
    assert text.startswith("support unit gemm (obj/support/gemm.o) feeds 1 kernel object(s) of 1 model(s)")
    assert "obj/kernels/ai.minibuild.FusedConv__float32.o  ai.minibuild.FusedConv float32" in text
    assert "model net: 1 node(s) (conv)" in text
    # A second model that needs no GEMM is not among its dependants; it is among GlobalAveragePool's.
    two = tmp_path / "two"
    shutil.copytree(models_dir, two)
    g = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="pool")], "gap",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), two / "pool_only.onnx")
    rc, out = _run(capsys, "rdeps", "obj/support/gemm.o", "--models", two, "--output", "json")
    res = json.loads(out)
    assert rc == 0 and res["kind"] == "support" and res["models"] == ["net"]
    rc, out = _run(capsys, "rdeps", "GlobalAveragePool", "--models", two, "--output", "json")
    res = json.loads(out)
    assert rc == 0 and res["kind"] == "kernel" and res["models"] == ["net", "pool_only"]
    assert [k["object"] for k in res["kernels"]] == ["obj/kernels/GlobalAveragePool__float32.o"]
    assert {(u["model"], u["node"]) for u in res["kernels"][0]["uses"]} == {("net", "gap"), ("pool_only", "pool")}
    rc, out = _run(capsys, "rdeps", "obj/kernels/GlobalAveragePool__float32.o", "--models", two, "--output", "dot")
    assert rc == 0 and '"obj/kernels/GlobalAveragePool__float32.o" -> "model pool_only";' in out


def test_rdeps_of_something_nothing_uses_names_what_is_used(models_dir, capsys):
    rc = cli.main(["query", "rdeps", "Softmax", "--models", str(models_dir)])
    err = capsys.readouterr().err
    assert rc == 1 and "nothing of these models depends on 'Softmax'" in " ".join(err.split())
    assert "GlobalAveragePool__float32" in err.replace("\n", "")

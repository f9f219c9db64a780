"""A transformer's feed-forward products through the sgemm, on BERT-small's shapes:
128 x 256 @ 256 x 1024 + bias (one k block, several blocks of B's columns, where A is
packed once for all of them) and 128 x 1024 @ 1024 x 256 + bias (four k blocks, A
packed per block), against onnxruntime on every x86 GEMM family, and the same bytes
at 1, 2 and 3 threads. MatMul -> Add -> Gelu fuses into ai.minibuild.FusedMatMulAct
(Gelu as the GEMM's post stage): the same bytes as the unfused Gelu kernel, both
approximations, every family and thread count; a corrupt fused node is refused."""

from __future__ import annotations


import numpy as np
import pytest
from onnx import helper

from models import assert_matches_onnxruntime, fused_ops, graph_model

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")


def _ffn(m, k, n, seed, gelu=None, extra_use=False):
    rng = np.random.default_rng(seed)
    feeds = {"a": rng.standard_normal((1, m, k)).astype(np.float32)}
    consts = {"w": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
              "bias": rng.standard_normal(n).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["y"])]
    outputs = ["y"]
    if gelu:
        nodes.append(helper.make_node("Gelu", ["y"], ["g"], approximate=gelu))
        outputs = ["g"]
    if extra_use:  # a second use of the sum keeps Gelu a node of its own
        nodes.append(helper.make_node("Neg", ["y"], ["q"]))
        outputs.append("q")
    return graph_model(nodes, feeds, consts, outputs, opset=20, name="ffn"), feeds


# (m, k, n): the intermediate and output products, and a short A (40 rows: one
# block of rows with a ragged last panel) over three column blocks.
SHAPES = [(128, 256, 1024), (128, 1024, 256), (40, 200, 1100)]


@pytest.mark.parametrize("isa", ["sse", "avx2", None], indirect=True)
@pytest.mark.parametrize("shape", SHAPES)
def test_ffn_products_match_onnxruntime(isa, shape):
    model, feeds = _ffn(*shape, seed=sum(shape))
    assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", SHAPES)
def test_ffn_products_same_bytes_on_threads(shape):
    model, feeds = _ffn(*shape, seed=sum(shape) + 1)
    outs = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize("isa", ["sse", "avx2", None], indirect=True)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(128, 256, 1024), (40, 200, 1100), (5, 7, 3)])
def test_gelu_fuses_and_matches_the_unfused_kernel(isa, approximate, shape):
    model, feeds = _ffn(*shape, seed=sum(shape) + 2, gelu=approximate)
    ops = fused_ops(model, feeds)
    assert [(d, o) for d, o, _ in ops] == [("ai.minibuild", "FusedMatMulAct")]
    assert ops[0][2]["activation"] == b"Gelu" and ops[0][2]["approximate"] == approximate.encode()
    fused = assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)
    unfused_model, _ = _ffn(*shape, seed=sum(shape) + 2, gelu=approximate, extra_use=True)
    assert [o for _, o, _ in fused_ops(unfused_model, feeds)] == ["FusedMatMul", "Gelu", "Neg"]
    unfused = testing.run_with_minirt(unfused_model, feeds)
    np.testing.assert_array_equal(fused[0], unfused[0])


def test_gelu_fused_same_bytes_on_threads():
    model, feeds = _ffn(128, 256, 1024, seed=9, gelu="none")
    outs = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize("attrs", [{"activation": "Relu"}, {"activation": "Gelu", "approximate": "erf"}])
def test_a_corrupt_fused_node_is_refused_naming_it(attrs):
    from onnx import TensorProto, numpy_helper
    feeds = {"a": np.ones((4, 8), np.float32)}
    node = helper.make_node("FusedMatMulAct", ["a", "w", "bias"], ["y"], name="ffn1", domain="ai.minibuild",
                            **attrs)
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("a", TensorProto.FLOAT, (4, 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 6))],
                              [numpy_helper.from_array(np.ones((8, 6), np.float32), "w"),
                               numpy_helper.from_array(np.ones(6, np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.minibuild", 1)])
    with pytest.raises(Exception) as err:
        testing.run_with_minirt(model, feeds)
    text = str(err.value)
    assert "ffn1" in text and ("activation" in text or "approximate" in text), text

"""FusedMatMul: the optimiser folds MatMul -> Add of a constant bias over the last axis
[-> Relu / Clip] (every linear layer of a transformer export) into one ai.minibuild
node whose GEMM tiles add the bias and clamp as they store. Each pattern is compared
with onnxruntime on the unfused model, with minirt's own unfused path (a second
consumer of the product keeps the Add apart), and on every GEMM family of this host;
biases that do not broadcast over the last axis alone are left unfused; a corrupt
fused node is refused with the node named."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import assert_matches_onnxruntime, fused_ops, graph_model

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

def randn(*shape, rng=np.random.default_rng(1618)):
    return rng.standard_normal(shape).astype(np.float32)


def check_ort(model, feeds):
    return assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)


# (A shape, B shape): a transformer's [batch, seq, hidden] x [hidden, out], a plain 2-D
# product with ragged tiles, a batched product with one B for all, and B batched too.
SHAPES = {
    "seq": ((1, 37, 48), (48, 70)),
    "2d": ((13, 29), (29, 51)),
    "batched_a": ((3, 5, 17), (17, 33)),
    "batched_b": ((2, 9, 16), (2, 16, 20)),
}


def _linear(shape, bias_shape=None, act=None, bias_first=False, extra_use=False):
    a_shape, b_shape = SHAPES[shape]
    n = b_shape[-1]
    rng = np.random.default_rng(len(shape))  # the same operands with and without the extra use
    feeds = {"a": randn(*a_shape, rng=rng)}
    consts = {"w": randn(*b_shape, rng=rng), "bias": randn(*(bias_shape or (n,)), rng=rng)}
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]),
             helper.make_node("Add", ["bias", "p"] if bias_first else ["p", "bias"], ["s"])]
    out = "s"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
        out = "y"
    elif act == "Clip":
        consts.update(lo=np.array(-0.5, np.float32), hi=np.array(0.75, np.float32))
        nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["y"]))
        out = "y"
    outputs = [out]
    if extra_use:
        nodes.append(helper.make_node("Neg", ["p"], ["q"]))
        outputs.append("q")
    return graph_model(nodes, feeds, consts, outputs, name="linear"), feeds


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("act", [None, "Relu", "Clip"])
def test_matmul_bias_fuses_and_matches_onnxruntime(shape, act):
    model, feeds = _linear(shape, act=act)
    ops = fused_ops(model, feeds)
    assert [(d, o) for d, o, _ in ops] == [("ai.minibuild", "FusedMatMul")]
    assert ops[0][2].get("activation", b"").decode() == (act or "")
    fused = check_ort(model, feeds)
    # The same product through the unfused kernels (the product has a second use).
    unfused_model, _ = _linear(shape, act=act, extra_use=True)
    assert ("ai.onnx", "MatMul") in [(d, o) for d, o, _ in fused_ops(unfused_model, feeds)]
    unfused = testing.run_with_minirt(unfused_model, feeds)
    np.testing.assert_array_equal(fused[0], unfused[0])


@pytest.mark.parametrize("bias_shape", [(1, 70), (1, 1, 70)])
def test_bias_of_ones_then_n_and_either_operand_order(bias_shape):
    model, feeds = _linear("seq", bias_shape=bias_shape, bias_first=True)
    assert [o for _, o, _ in fused_ops(model, feeds)] == ["FusedMatMul"]
    check_ort(model, feeds)


@pytest.mark.parametrize("bias_shape", [(37, 70), (1, 37, 1), (2, 1, 70)])
def test_biases_that_broadcast_wider_stay_an_add(bias_shape):
    """Per-row or batch-wide addends are not a column bias: MatMul and Add stay apart
    (and a bias of more dims than the product would widen it)."""
    model, feeds = _linear("seq", bias_shape=bias_shape)
    assert [o for _, o, _ in fused_ops(model, feeds)] == ["MatMul", "Add"]
    check_ort(model, feeds)


@pytest.mark.parametrize("isa", ["sse", "avx2", None], indirect=True)
def test_every_gemm_family(isa):
    model, feeds = _linear("seq", act="Relu")
    check_ort(model, feeds)


def test_a_bias_of_the_wrong_length_is_refused_naming_the_node(tmp_path):
    feeds = {"a": randn(4, 8)}
    node = helper.make_node("FusedMatMul", ["a", "w", "bias"], ["y"], name="fc1", domain="ai.minibuild")
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("a", TensorProto.FLOAT, (4, 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 6))],
                              [numpy_helper.from_array(randn(8, 6), "w"), numpy_helper.from_array(randn(5), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.minibuild", 1)])
    with pytest.raises(Exception, match=r"fc1.*bias must hold N = 6"):
        testing.run_with_minirt(model, feeds)

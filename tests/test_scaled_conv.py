"""ScaledConv: a squeeze-excitation's Mul(X, gate) feeding a convolution becomes one
ai.minibuild.ScaledConv, which scales the weights' columns by the gate each run
instead of scaling X. Every case is compared with onnxruntime on the unfused model
and with minirt's own unfused path (the Mul's output read a second time keeps the
Mul), at one and two threads; the rewrite stays away where the weights are not far
smaller than X, where the gate is not per channel and where the convolution is
grouped; a hand-written ScaledConv with a bad gate or group is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import graph_model, optimised

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def se_block(c=32, m=24, hw=(14, 15), k=1, residual=False, gate_first=False, gate_shape=None, group=1,
             stride=1, second_use=False, seed=3):
    """x -> Relu -> d; gate = Sigmoid(Conv(Relu(Conv(GAP(d))))); y = Conv(d * gate) [+ r]."""
    rng = np.random.default_rng(seed)
    feeds = {"x": randn(rng, 1, c, *hw)}
    consts = {
        "w1": randn(rng, 8, c, 1, 1, scale=c ** -0.5), "b1": randn(rng, 8, scale=0.1),
        "w2": randn(rng, c, 8, 1, 1, scale=8 ** -0.5), "b2": randn(rng, c, scale=0.1),
        "w": randn(rng, m, c // group, k, k, scale=(c // group * k * k) ** -0.5), "b": randn(rng, m, scale=0.3),
    }
    nodes = [
        helper.make_node("Relu", ["x"], ["d"]),
        helper.make_node("GlobalAveragePool", ["d"], ["p"]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["q"]),
        helper.make_node("Relu", ["q"], ["q1"]),
        helper.make_node("Conv", ["q1", "w2", "b2"], ["g0"]),
        helper.make_node("Sigmoid", ["g0"], ["gate4"]),
    ]
    gate = "gate4"
    if gate_shape is not None:  # the gate reshaped (C x 1 x 1, or not per channel at all)
        consts["gshape"] = np.asarray(gate_shape, np.int64)
        nodes.append(helper.make_node("Reshape", ["gate4", "gshape"], ["gate"]))
        gate = "gate"
    nodes.append(helper.make_node("Mul", [gate, "d"] if gate_first else ["d", gate], ["s"]))
    pads = [k // 2] * 4
    nodes.append(helper.make_node("Conv", ["s", "w", "b"], ["c" if residual else "y"], pads=pads, group=group,
                                  strides=[stride, stride]))
    outputs = ["y"]
    if residual:
        oh, ow = ((hw[0] + 2 * (k // 2) - k) // stride + 1, (hw[1] + 2 * (k // 2) - k) // stride + 1)
        feeds["r"] = randn(rng, 1, m, oh, ow)
        nodes.append(helper.make_node("Add", ["c", "r"], ["y"]))
    if second_use:
        nodes.append(helper.make_node("Neg", ["s"], ["z"]))
        outputs.append("z")
    return graph_model(nodes, feeds, consts, outputs, 17, name="se"), feeds


def ops_of(model, feeds):
    return [n.op_type for n in optimised(model, feeds).nodes]


def check(model, feeds, threads=1):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = testing.run_with_minirt(model, feeds, threads=threads)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return got


CASES = {
    "1x1": {},
    "1x1_residual": {"residual": True},
    "gate_first": {"gate_first": True},
    "gate_c11": {"gate_shape": (32, 1, 1)},
    "3x3": {"k": 3, "m": 16, "hw": (40, 41)},
    "3x3_s2_residual": {"k": 3, "m": 8, "hw": (32, 33), "stride": 2, "residual": True},
    "wide": {"c": 48, "m": 40, "hw": (28, 28)},
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_gate_fuses_into_the_conv_and_matches(case, threads):
    model, feeds = se_block(**CASES[case])
    g = optimised(model, feeds)
    ops = [n.op_type for n in g.nodes]
    assert "ScaledConv" in ops and "Mul" not in ops and "Add" not in ops, ops
    fused = g.nodes[ops.index("ScaledConv")]
    assert (len(fused.input) == 5) == bool(CASES[case].get("residual"))
    stood_for = {o.split()[0] for _, o in g.origins[fused.name]}
    assert {"Mul", "Conv"} <= stood_for, stood_for
    got = check(model, feeds, threads)
    # minirt's unfused path: the same y from the Mul and the convolution run apart
    plain, pfeeds = se_block(**CASES[case], second_use=True)
    assert "ScaledConv" not in ops_of(plain, pfeeds) and "Mul" in ops_of(plain, pfeeds)
    unfused = testing.run_with_minirt(plain, pfeeds, threads=threads)[0]
    np.testing.assert_allclose(got[0], unfused, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,why", [
    ({"c": 64, "m": 64, "hw": (4, 4)}, "weights (64 x 64) not 8 times smaller than X (64 x 16)"),
    ({"group": 2, "m": 16}, "grouped"),
    ({"gate_shape": (1, 1, 4, 8), "hw": (4, 8), "m": 2}, "a gate per pixel, not per channel"),
])
def test_gate_stays_a_mul(kwargs, why):
    model, feeds = se_block(**kwargs)
    ops = ops_of(model, feeds)
    assert "ScaledConv" not in ops and "Mul" in ops, (why, ops)
    check(model, feeds)


def _scaled_by_hand(s_count=8, group=1):
    rng = np.random.default_rng(9)
    feeds = {"x": randn(rng, 1, 8, 6, 6), "s": randn(rng, 1, s_count, 1, 1)}
    node = helper.make_node("ScaledConv", ["x", "w", "", "s"], ["y"], domain="ai.minibuild", group=group)
    graph = helper.make_graph([node], "hand",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [numpy_helper.from_array(randn(rng, 8, 8 // group, 1, 1), "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.minibuild", 1)])
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("s_count,group,message", [
    (6, 1, "S must hold one factor per input channel"),
    (8, 2, "ScaledConv takes group = 1 only"),
])
def test_bad_scaled_conv_is_refused_by_name(s_count, group, message):
    model, feeds = _scaled_by_hand(s_count, group)
    with pytest.raises(Exception, match=message) as err:
        testing.run_with_minirt(model, feeds)
    assert "ScaledConv" in str(err.value)


def test_hand_written_scaled_conv_computes_conv_of_the_scaled_input():
    model, feeds = _scaled_by_hand()
    w = numpy_helper.to_array(model.graph.initializer[0])
    want = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], feeds["x"] * feeds["s"])
    np.testing.assert_allclose(testing.run_with_minirt(model, feeds)[0], want, rtol=1e-5, atol=1e-6)

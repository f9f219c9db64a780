"""The int8 reference: onnxruntime's outputs made exact where its uint8 x int8 GEMM
saturates (AVX2 without VNNI). Full-range int8 weights and uint8 activations near 255
are the case that overflows 16-bit pair sums; the reference must equal the integer
arithmetic computed in numpy on every host, and the uint8 copy of a model must give
onnxruntime's own outputs bit for bit where nothing saturates."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(8)


def _model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "ortref", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _requant(acc, scale):
    return np.clip(np.rint(acc * np.float32(scale)), 0, 255).astype(np.uint8)


def test_matmulinteger_is_exact_and_does_not_saturate():
    a = RNG.integers(200, 256, size=(5, 64)).astype(np.uint8)  # near 255: pair sums pass 32,767
    b = RNG.integers(-128, 128, size=(64, 24)).astype(np.int8)
    m = _model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
               [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
               [helper.make_tensor_value_info("y", TensorProto.INT32, [5, 24])], {"b": b})
    (y,) = ortref.reference_session(m).run(None, {"a": a})
    np.testing.assert_array_equal(y, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinearconv_is_exact(per_channel):
    c, o, hw = 16, 8, 6
    x = RNG.integers(180, 256, size=(1, c, hw, hw)).astype(np.uint8)
    w = RNG.integers(-128, 128, size=(o, c, 3, 3)).astype(np.int8)
    ws = (RNG.uniform(1e-4, 3e-4, o) if per_channel else np.array(2e-4)).astype(np.float32)
    wz = np.zeros(ws.shape, np.int8)
    consts = {"xs": np.float32(0.05), "xz": np.uint8(100), "w": w, "ws": ws, "wz": wz,
              "ys": np.float32(0.5), "yz": np.uint8(128)}
    m = _model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4)],
               [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
               [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, o, hw, hw])], consts)
    (y,) = ortref.reference_session(m).run(None, {"x": x})
    xp = np.pad(x.astype(np.int64) - 100, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((o, hw, hw), np.int64)
    for ky in range(3):
        for kx in range(3):
            acc += np.einsum("oc,chw->ohw", w[:, :, ky, kx].astype(np.int64), xp[0, :, ky:ky + hw, kx:kx + hw])
    scale = (np.float32(0.05) * np.broadcast_to(ws, (o,)) / np.float32(0.5)).astype(np.float32)
    want = np.clip(np.rint(acc.astype(np.float32) * scale[:, None, None]) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(y[0], want)


def test_qdq_weights_become_uint8_and_outputs_do_not_change():
    """A QDQ Conv (uint8 activations, per-channel int8 weights without a zero point,
    as quantize_static writes it) on values that do not saturate: onnxruntime gives
    the same bytes for the model and for its uint8-weight copy, whose weight
    dequantisation now reads uint8 weights and zero points of 128."""
    w = RNG.integers(-10, 11, size=(4, 3, 3, 3)).astype(np.int8)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": w, "ws": np.full(4, 0.01, np.float32),
              "ys": np.float32(0.03), "yz": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1] * 4),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], consts)
    shifted = ortref.to_uint8_weights(m)
    inits = {t.name: numpy_helper.to_array(t) for t in shifted.graph.initializer}
    dq = next(n for n in shifted.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "wd")
    assert inits[dq.input[0]].dtype == np.uint8 and np.array_equal(inits[dq.input[0]].astype(np.int16), w.astype(np.int16) + 128)
    assert inits[dq.input[2]].dtype == np.uint8 and (inits[dq.input[2]] == 128).all()
    assert "w" not in inits  # the int8 original is gone
    x = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    (a,) = ortref._session(m).run(None, x)
    (b,) = ortref._session(shifted).run(None, x)
    np.testing.assert_array_equal(a, b)


def test_int8_activations_are_left_alone():
    """int8 x int8 has no uint8 twin: such nodes keep their weights."""
    consts = {"as": np.float32(0.1), "az": np.int8(0), "b": RNG.integers(-128, 128, size=(8, 4)).astype(np.int8),
              "bs": np.float32(0.1), "bz": np.int8(0), "ys": np.float32(1.0), "yz": np.int8(0)}
    m = _model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
               [helper.make_tensor_value_info("a", TensorProto.INT8, [2, 8])],
               [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 4])], consts)
    assert ortref.to_uint8_weights(m).SerializeToString() == m.SerializeToString()

"""com.microsoft QLinearConcat and QLinearAveragePool against onnxruntime, one node at
a time, uint8 and int8. Both requantise as onnxruntime does (QLinearConcat: a table
of dequantise-then-quantise per piece, a plain copy where a piece has the output's
parameters; QLinearAveragePool: float sums of the dequantised taps in row-major
order -- the interior outputs of a row summed side by side, the border ones alone --
divided by the count, quantised with round half to even), so outputs must
agree exactly: a difference of one step fails, naming its place."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref
from minibuild.testing import run_with_minirt

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(11)
NP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
TYPES = [np.uint8, np.int8]


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dt)


def _model(op, inputs: dict, consts: dict, order: list, out_shape, out_type, **attrs):
    node = helper.make_node(op, order, ["y"], domain="com.microsoft", **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, NP[v.dtype.type], v.shape)
                                       for k, v in inputs.items()],
                          [helper.make_tensor_value_info("y", out_type, out_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _check(model, feeds):
    ref = ortref.reference_session(model).run(None, feeds)[0]
    got = run_with_minirt(model, feeds)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    assert diff.max() == 0, f"max difference {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}"
    return got


def _scale(lo=0.01, hi=0.1):
    return np.array(RNG.uniform(lo, hi), np.float32)


def _concat(t, shapes, axis, params):
    """QLinearConcat of pieces of `shapes`; params: [(scale, zp)] per piece, then the output's."""
    inputs, consts = {}, {"ys": params[-1][0], "yz": params[-1][1]}
    order = ["ys", "yz"]
    for i, (shape, (s, z)) in enumerate(zip(shapes, params)):
        inputs[f"x{i}"] = _q(shape, t)
        consts[f"s{i}"], consts[f"z{i}"] = s, z
        order += [f"x{i}", f"s{i}", f"z{i}"]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return _model("QLinearConcat", inputs, consts, order, out, NP[t], axis=axis), inputs


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("axis, shapes", [(1, [(1, 4, 5, 5), (1, 3, 5, 5), (1, 6, 5, 5)]),
                                          (3, [(2, 3, 4, 2), (2, 3, 4, 7)]),
                                          (0, [(2, 9), (5, 9)])])
def test_qlinearconcat_per_input_scales(t, axis, shapes):
    params = [(_scale(), _q((), t)) for _ in shapes] + [(_scale(0.05, 0.2), _q((), t))]
    model, feeds = _concat(t, shapes, axis, params)
    _check(model, feeds)


@pytest.mark.parametrize("t", TYPES)
def test_qlinearconcat_equal_parameters_is_a_copy(t):
    s, z = np.array(0.037, np.float32), _q((), t)
    model, feeds = _concat(t, [(1, 3, 4, 4), (1, 5, 4, 4)], 1, [(s, z), (s, z), (s, z)])
    got = _check(model, feeds)
    np.testing.assert_array_equal(got, np.concatenate([feeds["x0"], feeds["x1"]], axis=1))


@pytest.mark.parametrize("t", TYPES)
def test_qlinearconcat_mixed_copy_and_requantised(t):
    # one piece shares the output's parameters, one saturates (a larger scale), one has a negative axis
    s, z = np.array(0.02, np.float32), _q((), t)
    params = [(s, z), (np.array(0.09, np.float32), _q((), t)), (np.array(0.005, np.float32), z), (s, z)]
    model, feeds = _concat(t, [(2, 8, 3), (2, 8, 2), (2, 8, 4)], 2, params)
    _check(model, feeds)
    neg = helper.make_attribute("axis", -1)
    model.graph.node[0].attribute[0].CopyFrom(neg)
    _check(model, feeds)


def _pool(t, shape, out_type=None, **attrs):
    x = _q(shape, t)
    consts = {"xs": _scale(), "xz": _q((), t), "ys": _scale(0.005, 0.05), "yz": _q((), t)}
    model = _model("QLinearAveragePool", {"x": x}, consts, ["x", "xs", "xz", "ys", "yz"], None, NP[t], **attrs)
    # the output shape comes from onnxruntime, so a wrong shape function fails the comparison
    sess = ortref.reference_session(model)
    out = sess.run(None, {"x": x})[0].shape
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", NP[t], out))
    return model, {"x": x}


POOLS = [
    ((1, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 4, 8, 8), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 10, 7), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 0, 1, 2], ceil_mode=1, count_include_pad=1)),
    ((1, 5, 13), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ((2, 3, 12), dict(kernel_shape=[3], strides=[2], ceil_mode=1, count_include_pad=1, pads=[1, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    ((1, 2, 6, 40), dict(kernel_shape=[2, 5], strides=[1, 3], pads=[1, 2, 0, 2])),  # wide rows: interior + borders
    ((1, 2, 5, 37), dict(kernel_shape=[3, 4], strides=[2, 1], pads=[1, 3, 1, 3], count_include_pad=1, ceil_mode=1)),
    ((1, 4, 7, 7), dict(kernel_shape=[7, 7])),                 # onnxruntime's global-average path
    ((1, 4, 9, 9), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 4, 9, 9), dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER", strides=[2, 2], count_include_pad=1)),
    ((1, 4, 9, 9), dict(kernel_shape=[3, 3], auto_pad="VALID", strides=[2, 2])),
]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape, attrs", POOLS, ids=[f"{len(s) - 2}d-{i}" for i, (s, _) in enumerate(POOLS)])
def test_qlinearaveragepool(t, shape, attrs):
    model, feeds = _pool(t, shape, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape, attrs", [((1, 9, 11, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                          ((2, 12, 5), dict(kernel_shape=[3], pads=[1, 1], count_include_pad=1)),
                                          ((1, 6, 6, 3), dict(kernel_shape=[6, 6]))])
def test_qlinearaveragepool_channels_last(t, shape, attrs):
    model, feeds = _pool(t, shape, channels_last=1, **attrs)
    _check(model, feeds)


def test_qlinearaveragepool_bad_pads_named():
    x = _q((1, 2, 6, 6), np.uint8)
    consts = {"xs": _scale(), "xz": _q((), np.uint8), "ys": _scale(), "yz": _q((), np.uint8)}
    model = _model("QLinearAveragePool", {"x": x}, consts, ["x", "xs", "xz", "ys", "yz"], [1, 2, 8, 8],
                   TensorProto.UINT8, kernel_shape=[2, 2], pads=[2, 2, 2, 2])
    with pytest.raises(Exception) as e:
        run_with_minirt(model, {"x": x})
    assert "pads" in str(e.value) and "kernel" in str(e.value), str(e.value)


# --- QDQ groups lowered at build time -------------------------------------------------------

def _qdq_model(op, n_in, in_params, out_params, t, shape, out_t=None, **attrs):
    """DequantizeLinear per input -> `op` -> QuantizeLinear; params: (scale, zp) each."""
    nodes, inits, inputs = [], [], []
    for i, (s, z) in enumerate(in_params[:n_in]):
        inits += [numpy_helper.from_array(s, f"s{i}"), numpy_helper.from_array(z, f"z{i}")]
        inputs.append(helper.make_tensor_value_info(f"x{i}", NP[t], shape))
        nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"f{i}"], name=f"dq{i}"))
    nodes.append(helper.make_node(op, [f"f{i}" for i in range(n_in)], ["g"], name="op", **attrs))
    inits += [numpy_helper.from_array(out_params[0], "so"), numpy_helper.from_array(out_params[1], "zo")]
    nodes.append(helper.make_node("QuantizeLinear", ["g", "so", "zo"], ["y"], name="q"))
    out_t = out_t or t
    g = helper.make_graph(nodes, "qdq", inputs, [helper.make_tensor_value_info("y", NP[out_t], None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    feeds = {f"x{i}": _q(shape, t) for i in range(n_in)}
    out = ortref.reference_session(m).run(None, feeds)[0].shape
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", NP[out_t], out))
    return m, feeds


def _lowered(model):
    from minibuild import optimize, registry
    g = optimize.from_model(model, "qdq.onnx")
    optimize.optimize(g, set(registry.load().ops))
    return g


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("op, attrs", [("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                       ("AveragePool", dict(kernel_shape=[2, 2], ceil_mode=1, count_include_pad=1)),
                                       ("Sigmoid", {}), ("LeakyRelu", dict(alpha=0.2))])
def test_qdq_unary_groups_lower_to_qlinear(t, op, attrs):
    params = [(_scale(), _q((), t))]
    model, feeds = _qdq_model(op, 1, params, (_scale(0.005, 0.02), _q((), t)), t, (1, 3, 7, 9), **attrs)
    g = _lowered(model)
    assert [(n.domain, n.op_type) for n in g.nodes] == [("com.microsoft", "QLinear" + op)], g.log
    origins = [o for _, o in g.origins["op"]]
    assert origins[0] == "DequantizeLinear dq0" and origins[-1] == "QuantizeLinear q", origins
    _check(model, feeds)  # onnxruntime fuses the same group into the same QLinear op: exact


@pytest.mark.parametrize("t", TYPES)
def test_qdq_concat_lowers_to_qlinearconcat(t):
    params = [(_scale(), _q((), t)) for _ in range(3)]
    model, feeds = _qdq_model("Concat", 3, params, (_scale(), _q((), t)), t, (1, 4, 5, 5), axis=1)
    g = _lowered(model)
    assert [n.op_type for n in g.nodes] == ["QLinearConcat"], g.log
    assert [o for _, o in g.origins["op"]] == ["DequantizeLinear dq0", "DequantizeLinear dq1",
                                               "DequantizeLinear dq2", "QuantizeLinear q"]
    _check(model, feeds)  # onnxruntime fuses the group into QLinearConcat too: exact


@pytest.mark.parametrize("t", TYPES)
def test_qdq_concat_of_equal_parameters_runs_on_int8(t):
    s, z = _scale(), _q((), t)
    model, feeds = _qdq_model("Concat", 2, [(s, z), (s, z)], (s, z), t, (2, 3, 4), axis=-1)
    g = _lowered(model)
    assert [(n.domain, n.op_type) for n in g.nodes] == [("", "Concat")], g.log
    assert g.value_info[g.nodes[0].input[0]][0] == NP[t]
    got = run_with_minirt(model, feeds)[0]
    np.testing.assert_array_equal(got, np.concatenate([feeds["x0"], feeds["x1"]], axis=-1))
    _check(model, feeds)


def test_qdq_group_that_cannot_lower_says_why():
    t = np.uint8
    model, _ = _qdq_model("AveragePool", 1, [(_scale(), _q((), t))], (_scale(), _q((), np.int8)), t, (1, 2, 6, 6),
                          out_t=np.int8, kernel_shape=[2, 2])
    g = _lowered(model)
    assert "AveragePool" in [n.op_type for n in g.nodes]
    assert any("AveragePool op stays float" in line and "output type differs" in line for line in g.log), g.log


# --- DynamicQuantizeMatMul: quantize_dynamic's chain fused ---------------------------------

def _dynamic_matmul(tmp_path, wt, per_channel, bias, a_shape=(2, 7, 48), n=40):
    """A float MatMul (+ bias Add) quantised by onnxruntime.quantization.quantize_dynamic."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    k = a_shape[-1]
    w = RNG.standard_normal((k, n)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["t" if bias else "y"])]
    inits = [numpy_helper.from_array(w, "w")]
    if bias:
        nodes.append(helper.make_node("Add", ["t", "b"], ["y"]))
        inits.append(numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "b"))
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (*a_shape[:-1], n))], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    import onnx
    onnx.save(m, src)
    quantize_dynamic(str(src), str(dst), weight_type=getattr(QuantType, wt), per_channel=per_channel)
    return onnx.load(str(dst))


def _close(got, ref):
    tol = 1e-6 * max(1.0, float(np.abs(ref).max()))
    assert got.shape == ref.shape and float(np.abs(got - ref).max()) <= tol, float(np.abs(got - ref).max())


@pytest.mark.parametrize("wt, per_channel", [("QInt8", False), ("QInt8", True), ("QUInt8", True)])
@pytest.mark.parametrize("bias", [True, False])
def test_dynamic_matmul_chain_fuses_and_matches(tmp_path, wt, per_channel, bias):
    q = _dynamic_matmul(tmp_path, wt, per_channel, bias)
    assert {"DynamicQuantizeLinear", "MatMulInteger", "Cast"} <= {n.op_type for n in q.graph.node}
    g = _lowered(q)
    assert [(n.domain, n.op_type) for n in g.nodes] == [("com.microsoft", "DynamicQuantizeMatMul")], g.log
    fused = g.nodes[0]
    assert len(fused.input) == (5 if bias else 4)
    originals = {o.split()[0] for _, o in g.origins[fused.name]}
    assert originals == {"DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul"} | ({"Add"} if bias else set())
    a = (RNG.standard_normal((2, 7, 48)) * 3).astype(np.float32)
    ref = ortref.reference_session(q).run(None, {"a": a})[0]
    got = run_with_minirt(q, {"a": a})[0]
    _close(got, ref)
    # onnxruntime running the fused operator itself, as minibuild wrote it
    m = g.to_model()
    m.ir_version = 8
    ref2 = ortref.reference_session(m).run(None, {"a": a})[0]
    _close(got, ref2)


def test_dynamic_quantize_matmul_node_from_a_model():
    # a model that carries com.microsoft DynamicQuantizeMatMul (all-negative A: the zero point at 255)
    b = _q((24, 10), np.int8)
    consts = {"b": b, "bs": np.linspace(0.01, 0.02, 10).astype(np.float32), "bz": np.zeros(10, np.int8),
              "bias": RNG.standard_normal(10).astype(np.float32)}
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"], domain="com.microsoft")
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    for a in (-np.abs(RNG.standard_normal((3, 24))).astype(np.float32), np.zeros((3, 24), np.float32)):
        ref = ortref.reference_session(m).run(None, {"a": a})[0]
        _close(run_with_minirt(m, {"a": a})[0], ref)

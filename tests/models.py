"""Test models built with onnx.helper: no downloads, seeded weights."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# torchvision's MobileNetV2 configuration: expansion t, channels c, repeats n, stride s.
_MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


class _Builder:
    def __init__(self, seed: int, opset: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.opset = opset
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def const(self, value: np.ndarray, prefix: str) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def conv(self, x, cin, cout, k, stride=1, group=1):
        fan_in = cin // group * k * k
        w = self.rng.uniform(-1, 1, (cout, cin // group, k, k)) * np.sqrt(3.0 / fan_in)
        b = self.rng.uniform(-0.1, 0.1, cout)
        y = self.name("conv")
        self.nodes.append(helper.make_node(
            "Conv", [x, self.const(w.astype(np.float32), "w"), self.const(b.astype(np.float32), "b")], [y],
            name=y, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
        return y

    def relu6(self, x):
        # torch.onnx.export at opset >= 11 writes ReLU6 as Clip with constant min/max inputs.
        y = self.name("clip")
        lo, hi = self.const(np.array(0.0, np.float32), "min"), self.const(np.array(6.0, np.float32), "max")
        self.nodes.append(helper.make_node("Clip", [x, lo, hi], [y], name=y))
        return y

    def op(self, op_type, inputs, **attrs):
        y = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [y], name=y, **attrs))
        return y

    def model(self, inputs, output, out_shape, name):
        graph = helper.make_graph(self.nodes, name, inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
                                  initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="minibuild-tests")
        m.ir_version = 7
        onnx.checker.check_model(m)
        return m


def mobilenet_v2(seed: int = 0, opset: int = 13, batch: int = 1, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNetV2 as torch.onnx.export writes it at opset 13 (eval mode: BatchNorm already
    folded into the convolutions): Conv, Clip, Add, GlobalAveragePool, Flatten, Gemm."""
    b = _Builder(seed, opset)
    x = "input"
    y = b.relu6(b.conv(x, 3, 32, 3, stride=2))
    cin = 32
    for t, c, n, s in _MOBILENET_V2:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = y
            if t != 1:
                h = b.relu6(b.conv(h, cin, hidden, 1))
            h = b.relu6(b.conv(h, hidden, hidden, 3, stride=stride, group=hidden))
            h = b.conv(h, hidden, c, 1)
            y = b.op("Add", [y, h]) if stride == 1 and cin == c else h
            cin = c
    y = b.relu6(b.conv(y, cin, 1280, 1))
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    w = b.const((b.rng.uniform(-1, 1, (classes, 1280)) * np.sqrt(3.0 / 1280)).astype(np.float32), "fc_w")
    bias = b.const(b.rng.uniform(-0.1, 0.1, classes).astype(np.float32), "fc_b")
    y = b.op("Gemm", [y, w, bias], alpha=1.0, beta=1.0, transB=1)
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, 3, size, size])]
    return b.model(inputs, y, [batch, classes], "mobilenet_v2")


def small_classifier(seed: int = 1, opset: int = 13) -> onnx.ModelProto:
    """Conv/Relu/MaxPool twice, then Flatten, Gemm, Softmax on a 1x3x32x32 image."""
    b = _Builder(seed, opset)
    y = b.op("Relu", [b.conv("image", 3, 8, 3)])
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Relu", [b.conv(y, 8, 16, 3)])
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [y], axis=1)
    w = b.const((b.rng.uniform(-1, 1, (10, 16 * 8 * 8)) * 0.05).astype(np.float32), "fc_w")
    y = b.op("Gemm", [y, w], transB=1)
    y = b.op("Softmax", [y], axis=1)
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])], y, [1, 10], "small_classifier")


def no_gemm_model(seed: int = 2) -> onnx.ModelProto:
    """Conv + Relu + GlobalAveragePool: a model without Gemm (or MatMul)."""
    b = _Builder(seed, 13)
    y = b.op("Relu", [b.conv("x", 3, 4, 3)])
    y = b.op("GlobalAveragePool", [y])
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])], y, [1, 4, 1, 1], "no_gemm")


def light_models_dir() -> str:
    """The nine model-zoo architectures the onnx wheel ships (weights as ConstantOfShape)."""
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_paths() -> list[str]:
    return sorted(glob.glob(os.path.join(light_models_dir(), "*.onnx")))


def with_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give graph outputs declared without a shape the one onnx infers, as exporters
    write them: onnx.checker (which every build runs) requires one."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if not out.type.tensor_type.HasField("shape") and out.name in known:
            out.type.CopyFrom(known[out.name].type)
    return model


def one_node(op, feeds, consts=None, opset=17, n_out=1, inputs=None, **attrs) -> onnx.ModelProto:
    """A single-`op` float model: `feeds` are runtime inputs, `consts` initializers, in
    that order unless `inputs` names them ('' for an omitted optional input). Outputs
    y0, y1, ... are declared without a shape: give them one (with_output_shapes, or
    from onnxruntime) before a build, which runs onnx.checker."""
    consts = consts or {}
    names = inputs if inputs is not None else list(feeds) + list(consts)
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def activation_nodes(act, src, dst, consts, clip=(0.0, 6.0), alpha=0.2) -> list:
    """Nodes computing dst = act(src): None (Identity), "Clip" to `clip` (its
    bounds added to consts as lo / hi), "LeakyRelu" by `alpha`, "SiLU" (Sigmoid
    and Mul), or any other one-input activation by its op name."""
    if act is None:
        return [helper.make_node("Identity", [src], [dst])]
    if act == "Clip":
        consts.update(lo=np.float32(clip[0]), hi=np.float32(clip[1]))
        return [helper.make_node("Clip", [src, "lo", "hi"], [dst])]
    if act == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [src], [dst], alpha=alpha)]
    if act == "SiLU":
        return [helper.make_node("Sigmoid", [src], [dst + "_g"]), helper.make_node("Mul", [src, dst + "_g"], [dst])]
    return [helper.make_node(act, [src], [dst])]


def graph_model(nodes, feeds, consts, outputs, opset=17, name="g") -> onnx.ModelProto:
    """A float model of `nodes`: `feeds` runtime inputs, `consts` initializers, and the
    values named in `outputs` as graph outputs with the shapes onnx infers for them."""
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    probe = helper.make_model(helper.make_graph(nodes, "probe", inputs, [], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    probe.ir_version = 8
    known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(probe, strict_mode=True).graph.value_info}
    model = helper.make_model(helper.make_graph(nodes, name, inputs, [known[o] for o in outputs], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: dict, rtol: float, atol: float) -> list:
    """Run `model` on `feeds` with onnxruntime and with minirt; the same number of
    outputs, the same shapes, values within rtol / atol. Returns minirt's outputs."""
    import onnxruntime as ort

    from minibuild import testing

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def optimised(model: onnx.ModelProto, feeds: dict):
    """minibuild's optimiser run on `model` with the feeds' shapes, over every op the registry has: the graph."""
    from minibuild import optimize, registry as registry_mod
    g = optimize.from_model(onnx.ModelProto.FromString(model.SerializeToString()), "<test>",
                            input_shapes={k: tuple(np.asarray(v).shape) for k, v in feeds.items()})
    optimize.optimize(g, set(registry_mod.load().ops))
    return g


def fused_ops(model: onnx.ModelProto, feeds: dict) -> list:
    """(domain, op, attributes) of each node after the optimiser."""
    return [(n.domain or "ai.onnx", n.op_type, {a.name: helper.get_attribute_value(a) for a in n.attribute})
            for n in optimised(model, feeds).nodes]

"""Android: the AAR, every .so checked field by field, the kernels run under qemu-user,
the Java API on the host JVM. One build per module (module-scoped fixtures)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _conv(nodes, inits, x, cin, cout, k, stride=1, group=1, relu6=True, name=""):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    w = (rng.standard_normal((cout, cin // group, k, k)) * (1.0 / np.sqrt(cin // group * k * k))).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    y = f"{name}_y"
    nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], name=name, kernel_shape=[k, k],
                                  strides=[stride, stride], pads=[k // 2] * 4, group=group))
    if not relu6:
        return y
    nodes.append(helper.make_node("Clip", [y, "c0", "c6"], [f"{name}_r"], name=f"{name}_clip"))
    return f"{name}_r"


def mobilenet_like(size: int = 32, classes: int = 10) -> onnx.ModelProto:
    """MobileNetV2's op set in small: Conv+Clip(0,6) (fused to FusedConv), depthwise
    Conv, inverted residual blocks with Add, GlobalAveragePool, Flatten, Gemm."""
    nodes, inits = [], [numpy_helper.from_array(np.array(0, np.float32), "c0"),
                        numpy_helper.from_array(np.array(6, np.float32), "c6")]
    x = _conv(nodes, inits, "input", 3, 16, 3, stride=2, name="stem")
    for i, (c, e) in enumerate([(16, 4), (16, 6)]):
        h = _conv(nodes, inits, x, c, c * e, 1, name=f"b{i}_expand")
        h = _conv(nodes, inits, h, c * e, c * e, 3, group=c * e, name=f"b{i}_dw")
        h = _conv(nodes, inits, h, c * e, c, 1, relu6=False, name=f"b{i}_project")
        nodes.append(helper.make_node("Add", [x, h], [f"b{i}_out"], name=f"b{i}_add"))
        x = f"b{i}_out"
    x = _conv(nodes, inits, x, 16, 64, 1, name="head")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    rng = np.random.default_rng(7)
    inits += [numpy_helper.from_array((rng.standard_normal((classes, 64)) * 0.1).astype(np.float32), "fc_w"),
              numpy_helper.from_array((rng.standard_normal(classes) * 0.1).astype(np.float32), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "mobilenet_like",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model

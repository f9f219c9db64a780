"""Shared by the packaging tests (test_ios, test_wheel, test_platform_all): a small
MobileNetV2-like model (Conv+Clip -> FusedConv, depthwise Conv, residual Add,
GlobalAveragePool, Flatten, Gemm), and one build of it per test process."""

from __future__ import annotations

import functools
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape, scale=0.3):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "relu6_min"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "relu6_max"))

    def conv(x, y, cin, cout, k, stride=1, group=1, relu6=True):
        name = y + "_conv" if relu6 else y
        nodes.append(helper.make_node("Conv", [x, w(y + "_w", cout, cin // group, k, k), w(y + "_b", cout, scale=0.1)],
                                      [name], kernel_shape=[k, k], strides=[stride, stride], group=group,
                                      pads=[k // 2] * 4))
        if relu6:
            nodes.append(helper.make_node("Clip", [name, "relu6_min", "relu6_max"], [y]))
        return y

    h = conv("input", "stem", 3, 8, 3, stride=2)
    e = conv(h, "b1_expand", 8, 16, 1)
    d = conv(e, "b1_dw", 16, 16, 3, group=16)
    p = conv(d, "b1_project", 16, 8, 1, relu6=False)
    nodes.append(helper.make_node("Add", [h, p], ["b1_out"]))
    f = conv("b1_out", "head", 8, 32, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [f], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", w("fc_w", 10, 32), w("fc_b", 10, scale=0.1)], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "mobilenet_like",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def input_data(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


def models_dir(root: Path) -> Path:
    d = Path(root) / "models"
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(model(), d / "mobilenet_like.onnx")
    return d


@functools.lru_cache(maxsize=None)
def shared_build(platforms: str = "linux,ios,python"):
    """One build per test process of the model for `platforms`, into a temporary
    folder; returns (models dir, out dir, pipeline.BuildResult, seconds)."""
    from minibuild import pipeline
    root = Path(tempfile.mkdtemp(prefix="mrt-pkg-test-"))
    models = models_dir(root)
    out = root / "out"
    t0 = time.monotonic()
    res = pipeline.run_build(pipeline.Options(models=models, out=out, platforms=[platforms],
                                              jobs=os.cpu_count() or 2))
    return models, out, res, time.monotonic() - t0

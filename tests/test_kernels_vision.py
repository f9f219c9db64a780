"""Vision kernels (Resize, ConvTranspose, PRelu, Mish) and the build-time SiLU /
Gelu / LayerNormalization fusions against onnxruntime, on the shapes real
segmenters, FPNs, decoders and transformers use. Each model runs through the
whole pipeline (optimise, convert, minirt). Outputs must match within 1e-4 of
the output's range."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

from minibuild import optimize, registry as registry_mod  # noqa: E402

RNG = np.random.default_rng(2024)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def make_model(nodes, feeds, consts=None, opset=17, outputs=("y",)):
    consts = consts or {}
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # Output shapes as onnxruntime computes them: the build wants static shapes.
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for out, value in zip(model.graph.output, sess.run(None, feeds)):
        out.CopyFrom(helper.make_tensor_value_info(out.name, TensorProto.FLOAT, value.shape))
    return model


def check(model, feeds, tol=1e-4):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        span = float(w.max() - w.min()) or 1.0
        err = float(np.abs(g - w).max())
        assert err <= tol * span, f"max error {err:.3g} > {tol} * range {span:.3g}"


def optimised_ops(model, feeds):
    """(domain, op) of every node of the graph the build would compile for."""
    reg = registry_mod.load()
    m = onnx.ModelProto.FromString(model.SerializeToString())
    shapes = {k: tuple(v.shape) for k, v in feeds.items()}
    g = optimize.from_model(m, "<test>", input_shapes=shapes)
    optimize.optimize(g, set(reg.ops))
    return g, [(n.domain or "ai.onnx", n.op_type) for n in g.nodes]


# --- Resize ---------------------------------------------------------------------------

def resize_model(x, opset=19, scales=None, sizes=None, **attrs):
    consts, inputs = {}, ["x"]
    if opset >= 11:
        consts["roi"] = np.array([], np.float32)
        inputs.append("roi")
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        inputs.append("scales")
    elif opset >= 11:
        inputs.append("")
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
        inputs.append("sizes")
    return make_model([helper.make_node("Resize", inputs, ["y"], **attrs)], {"x": x}, consts, opset)


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_resize_bilinear_x2(ctm):
    x = randn(1, 64, 56, 56)
    check(resize_model(x, scales=[1, 1, 2, 2], mode="linear", coordinate_transformation_mode=ctm), {"x": x})


@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners"])
def test_resize_bilinear_sizes_odd(ctm):
    # DeepLab-style: logits back to the image size, by sizes, not a whole factor.
    x = randn(1, 21, 33, 33)
    check(resize_model(x, opset=13, sizes=[1, 21, 129, 127], mode="linear", coordinate_transformation_mode=ctm),
          {"x": x})


def test_resize_bilinear_downsample():
    x = randn(2, 8, 40, 30)
    check(resize_model(x, scales=[1, 1, 0.5, 0.5], mode="linear"), {"x": x})


@pytest.mark.parametrize("opset,attrs", [
    (19, {"mode": "nearest"}),                                                          # torchvision FPN (F.interpolate)
    (13, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    (11, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    (13, {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}),
    (10, {"mode": "nearest"}),
    (10, {"mode": "linear"}),
])
def test_resize_nearest_upsample(opset, attrs):
    x = randn(1, 256, 25, 38)
    check(resize_model(x, opset=opset, scales=[1, 1, 2, 2], **attrs), {"x": x})


def test_resize_nearest_sizes_fpn():
    # FPN top-down path: upsample to the size of the lateral feature map.
    x = randn(1, 64, 13, 19)
    check(resize_model(x, opset=13, sizes=[1, 64, 26, 38], mode="nearest",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor"), {"x": x})


def test_resize_cubic():
    x = randn(1, 3, 24, 24)
    check(resize_model(x, scales=[1, 1, 2, 2], mode="cubic"), {"x": x})


def test_resize_unsupported_is_rejected_at_select():
    from minibuild.errors import UnsupportedOpsError
    x = randn(1, 1, 4, 4)
    model = resize_model(x, scales=[1, 1, 2, 2], mode="linear")
    model.graph.node[0].attribute.append(helper.make_attribute("coordinate_transformation_mode", "made_up"))
    with pytest.raises(UnsupportedOpsError, match="coordinate_transformation_mode"):
        testing.convert_model(model, {"x": x})


# --- ConvTranspose --------------------------------------------------------------------

def convtranspose_model(x, w, b=None, **attrs):
    consts = {"w": w}
    if b is not None:
        consts["b"] = b
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if b is not None else []), ["y"], **attrs)
    return make_model([node], {"x": x}, consts)


def test_convtranspose_k4_s2_p1():
    # The x2 upsampling layer of DCGAN / U-Net decoders.
    x, w, b = randn(1, 64, 28, 28), randn(64, 32, 4, 4, scale=0.1), randn(32)
    check(convtranspose_model(x, w, b, kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]), {"x": x})


def test_convtranspose_groups_dilations_output_padding():
    x, w, b = randn(2, 8, 7, 9), randn(8, 3, 3, 3, scale=0.3), randn(6)
    check(convtranspose_model(x, w, b, group=2, strides=[2, 3], pads=[1, 0, 2, 1], dilations=[2, 1],
                              output_padding=[1, 2]), {"x": x})


def test_convtranspose_depthwise_output_shape():
    x, w = randn(1, 16, 10, 10), randn(16, 1, 3, 3)
    check(convtranspose_model(x, w, group=16, strides=[2, 2], output_shape=[20, 21]), {"x": x})


def test_convtranspose_1d():
    x, w, b = randn(1, 16, 300), randn(16, 8, 5, scale=0.2), randn(8)
    check(convtranspose_model(x, w, b, strides=[4], pads=[2, 2]), {"x": x})


# --- PRelu, Mish ----------------------------------------------------------------------

def test_prelu_per_channel():
    x, slope = randn(1, 64, 56, 56), randn(64, 1, 1, scale=0.25)
    check(make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": x}, {"s": slope}), {"x": x})


def test_prelu_elementwise_and_scalar():
    x, slope = randn(2, 3, 5, 7), randn(3, 5, 7)
    check(make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": x}, {"s": slope}), {"x": x})
    check(make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": x}, {"s": np.array([0.1], np.float32)}),
          {"x": x})


def test_mish():
    x = np.concatenate([randn(4000, scale=4.0), np.array([-100, -30, -10, 0, 10, 20, 30, 100], np.float32)])
    check(make_model([helper.make_node("Mish", ["x"], ["y"])], {"x": x}, opset=18), {"x": x})


# --- fusions --------------------------------------------------------------------------

def test_silu_fusion():
    x = randn(1, 32, 40, 40, scale=3.0)
    for order in (["x", "s"], ["s", "x"]):
        model = make_model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
                            helper.make_node("Mul", order, ["y"], name="mul")], {"x": x})
        g, ops = optimised_ops(model, {"x": x})
        assert ops == [("ai.minibuild", "SiLU")]
        assert g.nodes[0].name == "sig"
        assert any("Sigmoid sig + Mul mul into ai.minibuild.SiLU" in line for line in g.log)
        check(model, {"x": x})


def test_silu_not_fused_when_sigmoid_is_used_elsewhere():
    x = randn(2, 8)
    model = make_model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                       {"x": x}, outputs=("y", "s"))
    _, ops = optimised_ops(model, {"x": x})
    assert ("ai.minibuild", "SiLU") not in ops


def gelu_nodes(order):
    c = {"sqrt2": np.array(2 ** 0.5, np.float32), "one": np.array(1.0, np.float32),
         "half": np.array(0.5, np.float32), "isqrt2": np.array(0.5 ** 0.5, np.float32)}
    if order == "torch":     # F.gelu exported below opset 20: ((x * (1 + erf(x / sqrt2))) * 0.5)
        nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["t"]), helper.make_node("Mul", ["x", "t"], ["m"]),
                 helper.make_node("Mul", ["m", "half"], ["y"])]
    elif order == "hf":      # x * 0.5 * (1.0 + erf(x * 1/sqrt2))
        nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["isqrt2", "x"], ["d"]),
                 helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["one", "e"], ["t"]),
                 helper.make_node("Mul", ["h", "t"], ["y"])]
    else:                    # x * ((1 + erf(x / sqrt2)) * 0.5)
        nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["t"]), helper.make_node("Mul", ["half", "t"], ["m"]),
                 helper.make_node("Mul", ["x", "m"], ["y"])]
    for i, n in enumerate(nodes):
        n.name = f"n{i}"
    return nodes, c


@pytest.mark.parametrize("order,opset", [("torch", 20), ("hf", 20), ("inner", 20), ("torch", 14), ("hf", 17)])
def test_gelu_fusion(order, opset):
    # Below opset 20 (where this pattern is what exporters write) the fused node is
    # still Gelu-20: the runtime is told the fused node's own operator version.
    x = randn(1, 128, 768, scale=2.0)
    nodes, consts = gelu_nodes(order)
    model = make_model(nodes, {"x": x}, consts, opset=opset)
    g, ops = optimised_ops(model, {"x": x})
    assert ops == [("ai.onnx", "Gelu")]
    assert optimize.since_version(g, g.nodes[0]) == 20
    assert g.nodes[0].name == "n0" and any("into Gelu n0" in line for line in g.log)
    check(model, {"x": x})


def test_gelu_not_fused_with_wrong_constant():
    x = randn(4, 16)
    nodes, consts = gelu_nodes("torch")
    consts["half"] = np.array(0.6, np.float32)
    model = make_model(nodes, {"x": x}, consts, opset=20)
    _, ops = optimised_ops(model, {"x": x})
    assert ("ai.onnx", "Gelu") not in ops


def layernorm_nodes(opset, affine=True):
    def mean(i, o):
        if opset >= 18:
            return helper.make_node("ReduceMean", [i, "axes"], [o])
        return helper.make_node("ReduceMean", [i], [o], axes=[-1])
    nodes = [mean("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]), mean("p", "v"),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n" if affine else "y"])]
    if affine:
        nodes += [helper.make_node("Mul", ["n", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]
    for i, n in enumerate(nodes):
        n.name = f"ln{i}"
    return nodes


@pytest.mark.parametrize("opset,affine", [(17, True), (18, True), (17, False), (13, True)])
def test_layernorm_fusion(opset, affine):
    x = randn(1, 197, 384, scale=3.0) + 1.5
    consts = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
              "gamma": randn(384) + 1.0, "beta": randn(384)}
    if opset >= 18:
        consts["axes"] = np.array([-1], np.int64)
    model = make_model(layernorm_nodes(opset, affine), {"x": x}, consts, opset=opset)
    g, ops = optimised_ops(model, {"x": x})
    assert ops == [("ai.onnx", "LayerNormalization")]
    assert optimize.since_version(g, g.nodes[0]) == 17
    assert g.nodes[0].name == "ln0" and any("into LayerNormalization ln0" in line for line in g.log)
    check(model, {"x": x})


def test_layernorm_not_fused_on_other_axis():
    x = randn(2, 6, 10)
    consts = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
              "gamma": randn(10), "beta": randn(10)}
    nodes = layernorm_nodes(17)
    for n in nodes:
        if n.op_type == "ReduceMean":
            del n.attribute[:]
            n.attribute.append(helper.make_attribute("axes", [1]))
    model = make_model(nodes, {"x": x}, consts, opset=17)
    _, ops = optimised_ops(model, {"x": x})
    assert ("ai.onnx", "LayerNormalization") not in ops


def test_fusions_in_manifest(tmp_path):
    """The fused nodes keep the first replaced node's name: the manifest's used_by shows it."""
    from minibuild import manifest as manifest_mod, scan
    x = randn(1, 16, 64)
    nodes, consts = gelu_nodes("torch")
    model = make_model(nodes + [helper.make_node("Sigmoid", ["y"], ["s"], name="sig"),
                                helper.make_node("Mul", ["s", "y"], ["z"], name="mul")],
                       {"x": x}, consts, opset=20, outputs=("z",))
    path = tmp_path / "fused.onnx"
    onnx.save(model, path)
    reg = registry_mod.load()
    sm = scan.scan_model(path, reg)
    text = manifest_mod.build([sm], scan.needs(sm, reg)).to_yaml()
    assert "op: SiLU" in text and "node: sig" in text
    assert "op: Gelu" in text and "node: n0" in text

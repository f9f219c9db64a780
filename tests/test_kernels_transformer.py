"""The float32 kernels transformer encoders (BERT, DistilBERT, ViT) need, against
onnxruntime on the shapes those models run: LayerNormalization, Erf, Gelu, Pow,
ReduceMean/Sum/Max, Softmax/LogSoftmax on every axis and both opset semantics,
and batched MatMul with broadcasting. Each case is a one-node model through the
whole pipeline; an output matches when max|minirt - ort| <= 1e-4 * its range."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import models

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(20)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


one_node = models.one_node


def with_output_shapes(model, shapes):
    """Outputs declared with their shapes (the harness runs onnx.checker, which
    wants a shape on every declared tensor type)."""
    for vi, shape in zip(model.graph.output, shapes):
        dims = vi.type.tensor_type.shape
        dims.Clear()
        for d in shape:
            dims.dim.add().dim_value = d
    return model


def check(model, feeds, rel=1e-4):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with_output_shapes(model, [w.shape for w in want])
    got = testing.run_with_minirt(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert g.dtype == np.float32
        # The range of the values; a single value (a full reduction) is its own scale.
        span = float(max(w.max() - w.min(), np.abs(w).max())) if w.size else 0.0
        err = float(np.abs(g.astype(np.float64) - w).max()) if w.size else 0.0
        assert err <= rel * max(span, 1e-6), (err, span)


# --- LayerNormalization -----------------------------------------------------------------

def test_layernorm_bert():
    x = randn(1, 128, 768)
    g, b = randn(768, scale=0.1) + 1, randn(768, scale=0.1)
    check(one_node("LayerNormalization", {"x": x}, {"g": g, "b": b}, epsilon=1e-12), {"x": x})


def test_layernorm_vit_mean_invstd_outputs():
    x = randn(1, 197, 768, scale=3.0) + 5
    g, b = randn(768), randn(768)
    check(one_node("LayerNormalization", {"x": x}, {"g": g, "b": b}, n_out=3, epsilon=1e-6), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -2, 3])
def test_layernorm_axes_no_bias(axis):
    x = randn(2, 3, 5, 7)
    g = randn(*x.shape[axis % 4:])
    check(one_node("LayerNormalization", {"x": x}, {"g": g}, axis=axis), {"x": x})


def test_layernorm_scale_and_bias_broadcast():
    # Scale of shape (1, 7) and a scalar-like B over the normalised dims (5, 7).
    x, g, b = randn(3, 5, 7), randn(1, 7), randn(1)
    check(one_node("LayerNormalization", {"x": x}, {"g": g, "b": b}, axis=1), {"x": x})


def test_layernorm_runtime_scale():
    x, g, b = randn(4, 33), randn(33), randn(33)
    check(one_node("LayerNormalization", {"x": x, "g": g, "b": b}), {"x": x, "g": g, "b": b})


# --- Erf, Gelu, Pow ------------------------------------------------------------------------

def test_erf_decomposed_gelu_shape():
    x = randn(1, 128, 3072, scale=3.0)
    check(one_node("Erf", {"x": x}, opset=13), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_bert_intermediate(approximate):
    x = randn(1, 128, 3072, scale=2.0)
    x[0, 0, :8] = [-30, -12, -5, -1e-3, 0, 1e-3, 12, 30]
    check(one_node("Gelu", {"x": x}, opset=20, approximate=approximate), {"x": x})


def test_gelu_accuracy_against_float64():
    # Relative accuracy where it matters to a network: |gelu(x)| >= 1e-6.
    x = np.linspace(-6, 6, 40001, dtype=np.float32)
    model = with_output_shapes(one_node("Gelu", {"x": x}, opset=20), [x.shape])
    (got,) = testing.run_with_minirt(model, {"x": x})
    from math import erf
    want = np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x.astype(np.float64)])
    keep = np.abs(want) >= 1e-6
    assert np.max(np.abs(got[keep] - want[keep]) / np.abs(want[keep])) < 2e-6


@pytest.mark.parametrize("e", [2.0, 3.0, 0.5, 1.0, 1.7])
def test_pow_scalar_exponent(e):
    x = np.abs(randn(1, 128, 768)) + (-0.5 if e == int(e) else 0.0)  # negative bases: integer powers only
    check(one_node("Pow", {"x": x}, {"e": np.array(e, np.float32)}), {"x": x})


def test_pow_broadcast_runtime_exponent():
    x, e = np.abs(randn(4, 1, 6)) + 0.1, randn(5, 1)
    check(one_node("Pow", {"x": x, "e": e}), {"x": x, "e": e})


def test_pow_opset1_axis_broadcast():
    # Pow-1 broadcasts only when asked, aligning the exponent with X at `axis`
    # (the shared opset < 7 rule of bcast.c, also serving Add/Sub/Mul/Div).
    x, e = np.abs(randn(2, 3, 4)) + 0.1, np.array([1.0, 2.0, 0.5], np.float32)
    model = with_output_shapes(one_node("Pow", {"x": x, "e": e}, opset=1, broadcast=1, axis=1), [x.shape])
    (got,) = testing.run_with_minirt(model, {"x": x, "e": e})
    np.testing.assert_allclose(got, x ** e.reshape(1, 3, 1), rtol=1e-6)
    bad = with_output_shapes(one_node("Pow", {"x": x, "e": e}, opset=1, broadcast=1, axis=3), [x.shape])
    with pytest.raises(Exception, match="legacy broadcast axis 3 does not fit input 1 \\(rank 1\\) into input 0 \\(rank 3\\)"):
        testing.run_with_minirt(bad, {"x": x, "e": e})


def test_pow_int_exponent():
    x = randn(3, 4)
    check(one_node("Pow", {"x": x}, {"e": np.array([3, 2, 1, 0], np.int64)}), {"x": x})


# --- Reductions ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([1], 0), ([0, 2], 1), (None, 0), ([1, 3], 0)])
def test_reduce(op, opset, axes, keepdims):
    x = randn(2, 33, 17, 5)
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    attrs = {"keepdims": keepdims}
    consts = {}
    if axes is not None and as_input:
        consts["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = axes
    check(one_node(op, {"x": x}, consts, opset=opset, **attrs), {"x": x})


def test_reduce_mean_bert_rows():
    x = randn(1, 128, 768)
    check(one_node("ReduceMean", {"x": x}, {"a": np.array([-1], np.int64)}, opset=18), {"x": x})


def test_reduce_sum_noop_with_empty_axes():
    x = randn(3, 4)
    check(one_node("ReduceSum", {"x": x}, opset=13, noop_with_empty_axes=1), {"x": x})


# --- Softmax / LogSoftmax -----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_softmax_axes(op, opset, axis):
    x = randn(3, 7, 19, scale=4.0)
    check(one_node(op, {"x": x}, opset=opset, axis=axis), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_attention_scores(op):
    x = randn(1, 12, 128, 128, scale=5.0)
    check(one_node(op, {"x": x}, opset=13, axis=-1), {"x": x})


# --- MatMul ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [
    ((1, 12, 128, 64), (1, 12, 64, 128)),   # attention scores Q K^T
    ((1, 12, 128, 128), (1, 12, 128, 64)),  # attention context
    ((128, 64), (1, 12, 64, 32)),           # A broadcast over B's batch
    ((2, 1, 5, 7), (3, 7, 4)),              # both broadcast
    ((1, 128, 768), (768,)),                # 1-D B
    ((7,), (2, 3, 7, 5)),                   # 1-D A
])
def test_matmul_batched(sa, sb):
    a, b = randn(*sa), randn(*sb)
    check(one_node("MatMul", {"a": a, "b": b}, opset=13), {"a": a, "b": b})


@pytest.mark.parametrize("isa", [None, "avx2", "sse"], indirect=True)
@pytest.mark.parametrize("sa,sb", [
    ((1, 4, 128, 64), (1, 4, 64, 128)),     # BERT-small's attention scores
    ((1, 4, 128, 128), (1, 4, 128, 64)),    # and context
    ((3, 13, 37), (3, 37, 29)),             # ragged panels (13 rows) and k tail (37 = 4 * 8 + 5)
    ((2, 1, 20, 9), (1, 3, 9, 50)),         # both broadcast; k shorter than one 8-step transpose
    ((5, 48, 256), (5, 256, 7)),            # rows that fill panels exactly, a thin B
])
def test_matmul_batched_activations_every_isa(isa, sa, sb):
    """Both operands at run time: A's row-major panels through the vector packer
    (AVX2 / AVX-512) or the scalar one (SSE), full and ragged."""
    a, b = randn(*sa), randn(*sb)
    check(one_node("MatMul", {"a": a, "b": b}, opset=13), {"a": a, "b": b})


def test_matmul_constant_weights_bert_projection():
    a, w = randn(1, 128, 768), randn(768, 3072, scale=0.05)
    check(one_node("MatMul", {"a": a}, {"w": w}, opset=13), {"a": a})


def test_matmul_constant_batched_b():
    a, w = randn(4, 1, 9, 16), randn(3, 16, 8)
    check(one_node("MatMul", {"a": a}, {"w": w}, opset=13), {"a": a})


# --- Transpose of 4-byte elements by 8 x 8 register blocks ---------------------------------

@pytest.mark.parametrize("isa", [None, "sse"], indirect=True)
@pytest.mark.parametrize("shape,perm", [
    ((1, 128, 4, 64), (0, 2, 3, 1)),   # attention's K -> K^T: 8 x 8 blocks
    ((3, 16, 24), (0, 2, 1)),          # a batch of 16 x 24 planes
    ((40, 8), (1, 0)),                 # one plane
    ((2, 12, 16), (0, 2, 1)),          # 12 rows: not whole blocks, the tiled copy
    ((1, 128, 4, 64), (0, 2, 1, 3)),   # whole rows move: memcpy
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_transpose_by_blocks(isa, shape, perm, dtype):
    x = (RNG.standard_normal(shape) * 1000).astype(dtype)
    want = np.transpose(x, perm)
    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
                              [helper.make_tensor_value_info("x", et, x.shape)],
                              [helper.make_tensor_value_info("y", et, want.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = testing.run_with_minirt(model, {"x": x})
    np.testing.assert_array_equal(got[0], want)


# --- A whole encoder layer, exported by torch.onnx as Hugging Face BERT writes it -------------

@pytest.mark.parametrize("opset,approximate", [(14, "none"), (17, "none"), (20, "tanh")])
def test_bert_layer_from_torch_export(opset, approximate):
    """Opset 14: LayerNorm decomposed (ReduceMean, Sub, Pow, Sqrt, Div), GELU as Erf;
    17: LayerNormalization; 20: Gelu. Q/K/V as separate projections, 4 heads."""
    torch = pytest.importorskip("torch")
    import io
    import math
    import onnx

    class Layer(torch.nn.Module):
        def __init__(self, d=64, h=4, ff=256):
            super().__init__()
            self.h, self.dh = h, d // h
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(d, eps=1e-12), torch.nn.LayerNorm(d, eps=1e-12)
            self.f1, self.f2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

        def heads(self, t):
            b, n, _ = t.shape
            return t.view(b, n, self.h, self.dh).permute(0, 2, 1, 3)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            ctx = (att @ v).permute(0, 2, 1, 3).reshape(b, n, d)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.f2(torch.nn.functional.gelu(self.f1(x), approximate=approximate)))

    torch.manual_seed(opset)
    x = torch.randn(1, 32, 64)
    f = io.BytesIO()
    torch.onnx.export(Layer().eval(), (x,), f, opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamo=False)
    check(onnx.load_from_string(f.getvalue()), {"x": x.numpy()})

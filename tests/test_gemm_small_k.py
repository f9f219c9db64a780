"""1x1 convolutions with few input channels (the GEMM path, K = 16 to 49) and
the tile epilogue, against onnxruntime under every ISA cap: EfficientNet-B0's
and MobileNetV2's expansions (16 -> 96, 24 -> 144, 40 -> 240 with SiLU), where
the AVX-512 tiles read B in place up to 256 rows of C when K <= 48 and
prefetch the next tile's B rows when a tile has at most 48 k steps; the edges
of those rules (48 and 49 input channels, 256 and 264 output channels); and the
epilogue's clamps, which apply only at finite bounds (a NaN passes a Conv
with no activation, as it does through onnxruntime's). The same bytes at 1 to
4 threads."""

from __future__ import annotations


import numpy as np
import pytest
from onnx import helper

from models import activation_nodes, graph_model

from minibuild import toolchain

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(2468)
ISAS = [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None]


def conv_model(c_in, c_out, h, w, act, residual, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((1, c_in, h, w)).astype(np.float32)}
    consts = {"w": (rng.standard_normal((c_out, c_in, 1, 1)) * c_in ** -0.5).astype(np.float32),
              "b": (rng.standard_normal(c_out) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"])]
    src = "c"
    if residual:
        feeds["r"] = rng.standard_normal((1, c_out, h, w)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        src = "s"
    nodes += activation_nodes(act, src, "y", consts)
    return graph_model(nodes, feeds, consts, ["y"]), feeds


def onnxruntime_of(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


SMALL_K = [
    # (c_in, c_out, h, w, activation, residual)
    (16, 96, 17, 23, "SiLU", False),      # 96 rows, 16 k steps: next-tile prefetch; N = 391 = 8 * 48 + 7
    (24, 144, 13, 19, "SiLU", False),     # 144 rows: B in place (K <= 48); N = 247
    (40, 240, 9, 11, "SiLU", False),      # 240 rows, N = 99 = 2 * 48 + 3
    (48, 256, 7, 9, None, True),          # the edge: 256 rows, K = 48, in place, with a residual
    (49, 256, 7, 9, "Relu", False),       # K = 49: B packed, the 8-rows-ahead prefetch
    (48, 264, 5, 13, "Relu", True),       # 264 rows: B packed
    (32, 192, 12, 12, "HardSwish", False),  # MobileNetV3-like 32 -> 192
    (16, 64, 3, 50, "Clip", False),       # 64 rows, N = 150 = 3 * 48 + 6
]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", SMALL_K, ids=lambda s: "{}-{}-{}x{}-{}-{}".format(*s))
def test_small_k_pointwise(isa, case):
    model, feeds = conv_model(*case)
    want = onnxruntime_of(model, feeds)
    got = testing.run_with_minirt(model, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [(16, 96, 56, 56, "SiLU", False), (24, 144, 28, 28, "SiLU", False),
                                  (40, 240, 14, 14, None, True)],
                         ids=lambda s: "{}-{}-{}x{}-{}-{}".format(*s))
def test_small_k_same_bytes_on_threads(case):
    model, feeds = conv_model(*case, seed=5)
    want = onnxruntime_of(model, feeds)
    outs = [testing.run_with_minirt(model, feeds, threads=t)[0] for t in (1, 2, 3, 4)]
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4)
    for got in outs[1:]:
        assert got.tobytes() == outs[0].tobytes()


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("c_in,c_out", [(16, 96), (300, 64), (64, 20)])
def test_nan_passes_a_conv_without_activation(isa, c_in, c_out):
    """No activation: the tiles clamp to no bounds, so a NaN input pixel gives NaN
    in every output channel of that pixel and nowhere else, as onnxruntime does."""
    model, feeds = conv_model(c_in, c_out, 7, 11, None, False, seed=3)
    feeds["x"][0, c_in // 2, 3, 4] = np.nan
    want = onnxruntime_of(model, feeds)
    got = testing.run_with_minirt(model, feeds)[0]
    assert np.isnan(want[0, :, 3, 4]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)

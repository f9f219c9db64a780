"""The 8-bit pooling, concat and fused dynamic-MatMul kernels built for aarch64 and
armv7 (static musl runners, the Android ABIs' ISA flags: tests/test_android.py's
mrt_run), run under qemu-user against onnxruntime on the same inputs:

- qop_u8 / qop_s8: MaxPool on uint8 / int8 (pads, strides, ceil_mode, 1-D and 2-D),
  com.microsoft QLinearAveragePool (pads, ceil_mode, count_include_pad, channels_last,
  1-D, the global path), QLinearConcat (pieces with their own scales, one a copy) and
  QLinearAdd (qgemm's vector loop: fused multiply-adds on aarch64, double on armv7);
- qdq: a QDQ graph the build lowers (AveragePool, Concat of equal and of different
  parameters, LeakyRelu, MaxPool on the int8 value);
- dynamic: quantize_dynamic's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul
  -> Add chain, fused at build time into DynamicQuantizeMatMul (qgemm's NEON tiles;
  K odd, M and N past the tiles), per-column int8 and uint8 weights.

8-bit outputs must be equal to onnxruntime's; float outputs within 1e-5 of their range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref
from test_android import build_runners, qemu_for, run_under_qemu

ort = pytest.importorskip("onnxruntime")

ARCHS = ["qemu-aarch64", "qemu-armv7"]
MS = "com.microsoft"
RNG = np.random.default_rng(77)
NP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT}


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dt)


class Graph:
    """Nodes and constants; output types and shapes are onnxruntime's."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], {}, 0

    def const(self, value) -> str:
        self.n += 1
        self.inits[f"c{self.n}"] = np.asarray(value)
        return f"c{self.n}"

    def qp(self, scale, zp) -> list[str]:
        return [self.const(np.float32(scale)), self.const(zp)]

    def op(self, op_type, inputs, domain="", outputs=1, **attrs):
        self.n += 1
        outs = [f"{op_type.lower()}{self.n}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"n{self.n}_{op_type}",
                                           domain=domain or None, **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, feeds: dict, outputs: list[str], dtype) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info(k, NP[v.dtype.type], v.shape) for k, v in feeds.items()]
        opsets = [helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)]
        inits = [numpy_helper.from_array(v, k) for k, v in self.inits.items()]

        def make(outs):
            m = helper.make_model(helper.make_graph(self.nodes, "arm_int8", inputs, outs, inits), opset_imports=opsets)
            m.ir_version = 8
            return m
        probe = make([helper.make_tensor_value_info(o, NP[dtype], None) for o in outputs])
        got = ortref.reference_session(probe).run(outputs, feeds)
        return make([helper.make_tensor_value_info(o, NP[v.dtype.type], v.shape) for o, v in zip(outputs, got)])


def qop_block(t):
    """QOperator 8-bit pooling and concat on type t."""
    g = Graph()
    z = lambda: _q((), t)  # noqa: E731
    feeds = {"x": _q((1, 5, 13, 11), t), "x1": _q((2, 6, 17), t)}
    sx, sp, sk = g.qp(0.05, z()), g.qp(0.04, z()), g.qp(0.07, z())
    mp = g.op("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    mp1 = g.op("MaxPool", ["x1"], kernel_shape=[4], strides=[3], pads=[2, 1])
    ap = g.op("QLinearAveragePool", ["x", *sx, *sp], MS, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
              ceil_mode=1)
    ap_inc = g.op("QLinearAveragePool", ["x", *sx, *sp], MS, kernel_shape=[2, 3], strides=[1, 2],
                  pads=[1, 0, 0, 2], count_include_pad=1)
    ap_nhwc = g.op("QLinearAveragePool", ["x", *sx, *sp], MS, kernel_shape=[3, 2], strides=[2, 1], pads=[1, 1, 1, 0],
                   channels_last=1)
    ap_1d = g.op("QLinearAveragePool", ["x1", *sx, *sp], MS, kernel_shape=[5], strides=[2], pads=[2, 2],
                 ceil_mode=1, count_include_pad=1)
    ap_glob = g.op("QLinearAveragePool", ["x", *sx, *sp], MS, kernel_shape=[13, 11])
    # mp keeps x's parameters (a max); ap has sp; mp again with sk's parameters: a copy
    cat = g.op("QLinearConcat", [*sk, mp, *sx, ap, *sp, mp, *sk], MS, axis=1)
    # QLinearAdd: 715 values (vectors and a tail), and a residual of 8,400 values
    feeds["x2"] = _q((1, 5, 13, 11), t)
    add = g.op("QLinearAdd", ["x", *sx, "x2", *sp, *sk], MS)
    feeds["r0"], feeds["r1"] = _q((1, 24, 20, 17), t), _q((1, 24, 20, 17), t)
    res = g.op("QLinearAdd", ["r0", *sp, "r1", *sk, *sx], MS)
    return g.model(feeds, [mp, mp1, ap, ap_inc, ap_nhwc, ap_1d, ap_glob, cat, add, res], t), feeds


def qdq_block():
    """A QDQ graph the build lowers to the int8 kernels."""
    g = Graph()
    feeds = {"x": (RNG.standard_normal((1, 4, 9, 10)) * 2).astype(np.float32)}
    pa, pb, pc = g.qp(0.03, np.uint8(128)), g.qp(0.02, np.uint8(120)), g.qp(0.05, np.uint8(100))
    xq = g.op("QuantizeLinear", ["x", *pa])
    dq = lambda v, p: g.op("DequantizeLinear", [v, *p])  # noqa: E731
    avg = g.op("QuantizeLinear", [g.op("AveragePool", [dq(xq, pa)], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                       strides=[2, 2], count_include_pad=1), *pb])
    mx = g.op("QuantizeLinear", [g.op("MaxPool", [dq(xq, pa)], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1]), *pa])
    leaky = g.op("QuantizeLinear", [g.op("LeakyRelu", [dq(mx, pa)], alpha=0.15), *pc])
    cat = g.op("QuantizeLinear", [g.op("Concat", [dq(avg, pb), dq(mx, pa), dq(leaky, pc)], axis=1), *pc])
    same = g.op("QuantizeLinear", [g.op("Concat", [dq(mx, pa), dq(mx, pa)], axis=2), *pa])
    return g.model(feeds, [avg, mx, leaky, cat, same], np.uint8), feeds


def dynamic_block():
    """Two quantize_dynamic chains (int8 and uint8 per-column weights, one with a bias)."""
    g = Graph()
    m, k, n1, n2 = 19, 45, 27, 33
    feeds = {"x": (RNG.standard_normal((1, m, k)) * 1.5).astype(np.float32)}
    xq, xs, xz = g.op("DynamicQuantizeLinear", ["x"], outputs=3)
    outs = []
    for n, wt, bias in ((n1, np.int8, True), (n2, np.uint8, False)):
        ws = g.const(np.linspace(0.004, 0.01, n).astype(np.float32))
        wz = g.const(np.zeros(n, wt) if wt == np.int8 else _q((n,), wt))
        acc = g.op("MatMulInteger", [xq, g.const(_q((k, n), wt)), xz, wz])
        y = g.op("Mul", [g.op("Cast", [acc], to=TensorProto.FLOAT), g.op("Mul", [xs, ws])])
        if bias:
            y = g.op("Add", [y, g.const(RNG.standard_normal(n).astype(np.float32))])
        outs.append(y)
    return g.model(feeds, outs, np.float32), feeds


BLOCKS = {"qop_u8": lambda: qop_block(np.uint8), "qop_s8": lambda: qop_block(np.int8), "qdq": qdq_block,
          "dynamic": dynamic_block}


@pytest.fixture(scope="module")
def arm_build(tmp_path_factory):
    for arch in ARCHS:
        qemu_for(arch)
    root = tmp_path_factory.mktemp("arm-int8")
    models = root / "models"
    models.mkdir()
    feeds = {}
    for name, make in BLOCKS.items():
        model, feeds[name] = make()
        onnx.save(model, models / f"{name}.onnx")
    mrt, runners, res = build_runners(models, root / "out", keys=ARCHS)
    return models, feeds, mrt, runners, res


def test_blocks_reach_the_int8_kernels(arm_build):
    """The optimised graphs hold the kernels under test and no float pooling, concat
    or MatMulInteger chain (else the qemu comparison would test something else)."""
    *_, res = arm_build
    sigs = {(e.op, s) for e in res.manifest.entries for s in e.signatures}
    for op, s in [("MaxPool", "uint8"), ("MaxPool", "int8"), ("QLinearAveragePool", "uint8"),
                  ("QLinearAveragePool", "int8"), ("QLinearConcat", "uint8"), ("QLinearConcat", "int8"),
                  ("QLinearAdd", "uint8"), ("QLinearAdd", "int8"),
                  ("QLinearLeakyRelu", "uint8"), ("Concat", "uint8"), ("DynamicQuantizeMatMul", "float32,int8"),
                  ("DynamicQuantizeMatMul", "float32,uint8")]:
        assert (op, s) in sigs, (op, s, sorted(sigs))
    ops = {op for op, _ in sigs}
    assert not ops & {"AveragePool", "MatMulInteger", "LeakyRelu"}, ops
    assert ("Concat", "float32") not in sigs and ("MaxPool", "float32") not in sigs


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_int8_ops_under_qemu_match_onnxruntime(arm_build, arch, block, tmp_path):
    models, feeds, mrt, runners, _ = arm_build
    sess = ortref.reference_session(models / f"{block}.onnx")
    refs = sess.run(None, feeds[block])
    names = [o.name for o in sess.get_outputs()]
    got = run_under_qemu(arch, runners[arch], mrt[block], [feeds[block][i.name] for i in sess.get_inputs()], tmp_path)
    assert len(got) == len(refs)
    for raw, ref, name in zip(got, refs, names):
        out = np.frombuffer(raw, dtype=ref.dtype).reshape(ref.shape)
        if ref.dtype.kind in "iu":
            bad = np.flatnonzero(out != ref)
            assert not bad.size, f"{arch} {block} {name}: {bad.size} of {ref.size} differ, first at {bad[:5]}"
        else:
            err = float(np.abs(out.astype(np.float64) - ref).max())
            assert err <= 1e-5 * float(np.abs(ref).max()), f"{arch} {block} {name}: max error {err:.3g}"

"""qgemm's ARM paths under qemu-user against onnxruntime, bit for bit: on aarch64 the
ARMv8.2 dotprod (sdot) micro-kernel, chosen at run time from AT_HWCAP (qemu's
`-cpu max` has dotprod), and the plain NEON one (`-cpu cortex-a53` has not; and
MINIRT_MAX_CPU_ISA=neon on a dotprod CPU); armv7 runs the portable vectors.

One model holds the int8 kernels on qgemm: QLinearConv (3x3 with full and partial
tiles, a 1x1 read in place, a 1x1 stride 2, a 7x7 stride-2 stem, depthwise stride 1
and 2, per-channel weights, uint8 and int8), QLinearMatMul past the tiles at k below
and above 64, QGemm with a bias, MatMulInteger with uint8 x uint8 and per-column
zero points, ConvInteger grouped and padded."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import ortref
from test_android import qemu_for, qemu_runners

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(77)


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dt)


def _scale(n=None):
    return (RNG.uniform(0.002, 0.02, size=n) if n else np.array(RNG.uniform(0.01, 0.05))).astype(np.float32)


def int8_model():
    nodes, inits = [], []

    def const(v):
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(v), name))
        return name

    def qconv(x, xt, c, m, k, stride, pad, group=1, name=None):
        w = _q((m, c // group, k, k), np.int8)
        ins = [x, const(_scale()), const(_q((), xt)), const(w), const(_scale(m)), const(np.zeros(m, np.int8)),
               const(np.float32(0.4)), const(_q((), xt)), const(RNG.integers(-3000, 3000, m).astype(np.int32))]
        nodes.append(helper.make_node("QLinearConv", ins, [name], strides=[stride] * 2, pads=[pad] * 4, group=group))
        return name

    outs = [qconv("xu", np.uint8, 24, 40, 3, 1, 1, name="conv3x3_u8"),
            qconv("xu", np.uint8, 24, 20, 1, 1, 0, name="conv1x1_u8"),
            qconv("xu", np.uint8, 24, 16, 1, 2, 0, name="conv1x1_s2_u8"),
            qconv("xu", np.uint8, 24, 24, 3, 2, 1, group=24, name="dw_s2_u8"),
            qconv("xs", np.int8, 3, 32, 7, 2, 3, name="stem_s8"),
            qconv("xs", np.int8, 3, 3, 3, 1, 1, group=3, name="dw_s1_s8")]
    for k in (24, 200):
        nodes.append(helper.make_node(
            "QLinearMatMul", [f"a{k}", const(_scale()), const(np.uint8(131)), const(_q((k, 70), np.int8)),
                              const(_scale(70)), const(np.zeros(70, np.int8)), const(np.float32(0.6)),
                              const(np.uint8(120))], [f"matmul_k{k}"]))
        outs.append(f"matmul_k{k}")
    nodes.append(helper.make_node(
        "QGemm", ["a200", const(_scale()), const(np.uint8(131)), const(_q((45, 200), np.int8)), const(_scale(45)),
                  const(np.zeros(45, np.int8)), const(RNG.integers(-3000, 3000, 45).astype(np.int32)),
                  const(np.float32(0.6)), const(np.uint8(120))], ["qgemm"], domain="com.microsoft", transB=1))
    nodes.append(helper.make_node("MatMulInteger", ["a200", "bu", const(np.uint8(200)), const(_q((29,), np.uint8))],
                                  ["matmulinteger_u8u8"]))
    nodes.append(helper.make_node("ConvInteger", ["xu", const(_q((10, 12, 3, 3), np.int8)), const(np.uint8(17))],
                                  ["convinteger"], pads=[1, 1, 1, 1], group=2))
    outs += ["qgemm", "matmulinteger_u8u8", "convinteger"]
    feeds = {"xu": _q((1, 24, 17, 15), np.uint8), "xs": _q((1, 3, 23, 21), np.int8),
             "a24": _q((37, 24), np.uint8), "a200": _q((37, 200), np.uint8), "bu": _q((200, 29), np.uint8)}
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    types = {o: TensorProto.INT32 if "integer" in o else TensorProto.INT8 if o.endswith("s8") else TensorProto.UINT8
             for o in outs}
    # Shapes from onnxruntime's run (QGemm has no onnx shape function).
    full = helper.make_model(helper.make_graph(nodes, "p", inputs,
                                               [helper.make_tensor_value_info(o, types[o], None) for o in outs], inits),
                             opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    full.ir_version = 8
    refs = ortref.reference_session(full).run(None, feeds)
    typed = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape)
             for o, r in zip(outs, refs)]
    model = helper.make_model(helper.make_graph(nodes, "arm_int8", inputs, typed, inits),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds, dict(zip(outs, refs))


@pytest.fixture(scope="module")
def arm_int8(tmp_path_factory):
    model, feeds, refs = int8_model()
    mrt, runners = qemu_runners(tmp_path_factory.mktemp("arm-int8"), "int8", model)
    return model, feeds, refs, mrt, runners


# (arch, qemu -cpu, MINIRT_MAX_CPU_ISA): the sdot kernel, plain NEON twice over (no
# dotprod; dotprod capped), armv7's portable vectors
CASES = [("qemu-aarch64", "max", None), ("qemu-aarch64", "cortex-a53", None), ("qemu-aarch64", "max", "neon"),
         ("qemu-armv7", "max", None)]


@pytest.mark.parametrize("arch, cpu, cap", CASES, ids=["aarch64-dotprod", "aarch64-a53", "aarch64-capped", "armv7"])
def test_int8_kernels_under_qemu_are_exact(arm_int8, arch, cpu, cap, tmp_path):
    model, feeds, refs, mrt, runners = arm_int8
    files = []
    for k, i in enumerate(model.graph.input):
        files.append(tmp_path / f"in{k}.bin")
        np.ascontiguousarray(feeds[i.name]).tofile(files[-1])
    env = {"PATH": "/usr/bin:/bin"} | ({"MINIRT_MAX_CPU_ISA": cap} if cap else {})
    proc = subprocess.run([qemu_for(arch), "-cpu", cpu, str(runners[arch]), str(mrt), *map(str, files),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{arch} {cpu}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    for k, o in enumerate(model.graph.output):
        ref = refs[o.name]
        got = np.fromfile(tmp_path / f"out{k}.bin", dtype=ref.dtype).reshape(ref.shape)
        bad = np.flatnonzero(got != ref)
        assert not bad.size, (f"{arch} -cpu {cpu} {o.name}: {bad.size} of {ref.size} differ, first at {bad[:5]}: "
                              f"got {got.ravel()[bad[:5]]}, want {ref.ravel()[bad[:5]]}")

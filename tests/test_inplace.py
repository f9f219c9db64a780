"""Outputs in a dying input's memory (the registry's `in_place`, docs/registry.md):
FusedConv / FusedConvAct write Y into the residual's arena slot when the residual
is last read there. The planner's rule (plan_memory on small graphs: shared when
it may be, not when the residual lives on, through a view too, is a graph input
or output, a constant, read twice by the node, or of another size), and the
kernel's in-place paths on whole models against onnxruntime: the GEMM paths
(1x1 and im2col, one and several k blocks) add the product onto the residual;
the dense, depthwise and stem paths read a copy. The same bytes at 1, 2 and 4
threads, every x86 ISA cap; the arena shrinks by the shared buffers."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import helper

from minibuild import convert, registry as registry_mod, toolchain
from minibuild import ortref
from models import activation_nodes, graph_model

ort = pytest.importorskip("onnxruntime")
testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(4242)
F = 4 * 2 * 8 * 8  # bytes of a (1, 2, 8, 8) float tensor


# --- the planner -----------------------------------------------------------

def vi(name):
    return SimpleNamespace(name=name)


def graph(nodes, inputs=("a",), outputs=("out",), consts=("W", "B")):
    return SimpleNamespace(nodes=nodes, inputs=[vi(n) for n in inputs], outputs=[vi(n) for n in outputs],
                           consts={c: np.zeros(1, np.float32) for c in consts})


def fused(x, r, y="y"):
    return helper.make_node("FusedConv", [x, "W", "B", r], [y], domain="ai.minibuild")


def relu(x, y):
    return helper.make_node("Relu", [x], [y])


def plan(g, sizes=None):
    names = {n for node in g.nodes for n in list(node.input) + list(node.output)} | {v.name for v in g.inputs}
    sz = {n: F for n in names if n not in g.consts}
    sz.update(sizes or {})
    pairs = [(3, 0) if node.op_type == "FusedConv" else None for node in g.nodes]
    return convert.plan_memory(g, sz, pairs)


def base_nodes():
    return [relu("a", "r"), relu("a", "x"), fused("x", "r"), relu("y", "out")]


def test_output_takes_the_dying_residual():
    p = plan(graph(base_nodes()))
    assert p.in_place == 1
    assert p.offsets["y"] == p.offsets["r"]
    # r, x and a live at once; y reuses r: a, x (or r/y) and out fit in three slots
    assert p.arena_size == 3 * convert._align(F, convert.ALIGN)


def test_without_the_pairs_each_keeps_its_own():
    g = graph(base_nodes())
    p = convert.plan_memory(g, {n: F for n in ["a", "r", "x", "y", "out"]})
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]


def test_not_when_the_residual_is_read_later():
    nodes = base_nodes() + [helper.make_node("Add", ["out", "r"], ["out2"])]
    p = plan(graph(nodes, outputs=("out2",)))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]


def test_not_when_a_view_of_the_residual_is_read_later():
    nodes = [relu("a", "r0"), helper.make_node("Identity", ["r0"], ["r"]), relu("a", "x"), fused("x", "r"),
             relu("y", "out"), helper.make_node("Add", ["out", "r0"], ["out2"])]
    p = plan(graph(nodes, outputs=("out2",)))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r0"]
    # the view alone dies there: shared
    nodes = nodes[:5]
    p = plan(graph(nodes))
    assert p.in_place == 1 and p.offsets["y"] == p.offsets["r0"] == p.offsets["r"]


def test_not_a_graph_input():
    p = plan(graph([relu("a", "x"), fused("x", "a"), relu("y", "out")]))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["a"]


def test_not_a_graph_output():
    p = plan(graph(base_nodes(), outputs=("out", "r")))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]
    # nor when Y itself is one
    p = plan(graph(base_nodes()[:3], outputs=("y",)))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]


def test_not_a_constant():
    g = graph([relu("a", "x"), fused("x", "R"), relu("y", "out")], consts=("W", "B", "R"))
    p = plan(g)
    assert p.in_place == 0 and "R" not in p.offsets


def test_not_another_size():
    p = plan(graph(base_nodes()), {"r": 2 * F})
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]


def test_not_when_the_node_reads_it_twice():
    p = plan(graph([relu("a", "r"), fused("r", "r"), relu("y", "out")]))
    assert p.in_place == 0 and p.offsets["y"] != p.offsets["r"]


def test_chains_share_one_buffer():
    # y1 takes r, y2 takes y1 (a MobileNetV2 stage of two residual blocks)
    nodes = [relu("a", "r"), relu("a", "x1"), fused("x1", "r", "y1"), relu("y1", "x2"),
             fused("x2", "y1", "y2"), relu("y2", "out")]
    p = plan(graph(nodes))
    assert p.in_place == 2 and p.offsets["r"] == p.offsets["y1"] == p.offsets["y2"]


def test_registry_declares_and_validates(tmp_path):
    reg = registry_mod.load()
    assert reg.get("ai.minibuild", "FusedConv").in_place == (3, 0)
    assert reg.get("ai.minibuild", "FusedConvAct").in_place == (3, 0)
    assert reg.get("ai.onnx", "Conv").in_place is None
    root = registry_mod.resources.path("ops_registry")
    text = (root / "FusedConv.yaml").read_text()
    bad = tmp_path / "FusedConv.yaml"
    for value in ["{input: 3}", "{input: -1, output: 0}", "3", "{input: 3, output: x}"]:
        bad.write_text(text.replace("in_place: {input: 3, output: 0}", f"in_place: {value}"))
        with pytest.raises(registry_mod.RegistryError, match="in_place"):
            registry_mod._load_op(bad, root.parent / "kernels_src")


# --- the kernel, whole models ----------------------------------------------

def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_block(c_in, c_mid, hw, k=1, group=1, act="Relu", pads=0, feed_scale=1.0, shortcut=None):
    """Relu(X) -> Conv a (the residual) ; Relu(X) -> Conv b ; Add(b, a) [-> act] ->
    Conv c: b + the residual fuses into one FusedConv whose residual (a's output,
    not read again) dies there. Either Conv can take the Add; with `shortcut`
    (an activation after Conv a, as a basic block's identity path is a tensor
    no Conv writes last) only b can, so that b's own path runs in place."""
    x = randn(1, c_in, hw, hw, scale=feed_scale)
    consts = {
        "Wa": randn(c_mid, c_in, 1, 1, scale=0.2), "Ba": randn(c_mid, scale=0.1),
        "Wb": randn(c_mid, c_in // group if group == 1 else 1, k, k, scale=0.2), "Bb": randn(c_mid, scale=0.1),
        "Wc": randn(8, c_mid, 1, 1, scale=0.2),
    }
    nodes = [helper.make_node("Relu", ["X"], ["xr"]),
             helper.make_node("Conv", ["xr", "Wa", "Ba"], ["a"])]
    src = "xr"
    if group != 1:  # depthwise on c_mid channels
        consts["Wm"] = randn(c_mid, c_in, 1, 1, scale=0.2)
        nodes.append(helper.make_node("Conv", ["xr", "Wm"], ["m"]))
        src = "m"
    attrs = {"pads": [pads] * 4} if pads else {}
    if group != 1:
        attrs["group"] = group
    nodes.append(helper.make_node("Conv", [src, "Wb", "Bb"], ["b"], **attrs))
    res = "a"
    if shortcut:
        nodes += activation_nodes(shortcut, "a", "ar", consts, alpha=0.1)
        res = "ar"
    nodes.append(helper.make_node("Add", ["b", res], ["s"]))
    last = "s"
    if act:
        nodes += activation_nodes(act, "s", "t", consts, alpha=0.1)
        last = "t"
    nodes.append(helper.make_node("Conv", [last, "Wc"], ["Y"]))
    return graph_model(nodes, {"X": x}, consts, ["Y"], 17, name="inplace"), {"X": x}


BLOCKS = {
    # ResNet-50's bottleneck end (1x1 + residual + Relu), ragged tiles
    "1x1_relu": dict(c_in=24, c_mid=72, hw=13),
    # several k blocks (k = 300 > 256): accumulate must keep the residual
    "1x1_kblocks": dict(c_in=300, c_mid=40, hw=9),
    # MobileNetV2's projection + residual (no activation), fewer than 64 rows
    "1x1_linear": dict(c_in=32, c_mid=24, hw=14, act=None),
    "1x1_clip": dict(c_in=16, c_mid=64, hw=15, act="Clip"),
    "1x1_leaky": dict(c_in=16, c_mid=36, hw=10, act="LeakyRelu"),
    "1x1_sigmoid": dict(c_in=16, c_mid=36, hw=10, act="Sigmoid"),
    # a basic block's 3x3 + residual: the dense path (AVX-512) or im2col
    "3x3_relu": dict(c_in=32, c_mid=64, hw=14, k=3, pads=1),
    "3x3_small": dict(c_in=8, c_mid=20, hw=9, k=3, pads=1),
    "3x3_kblocks": dict(c_in=40, c_mid=24, hw=8, k=3, pads=1),
    # depthwise + residual: the depthwise path reads a copy
    "depthwise": dict(c_in=8, c_mid=32, hw=12, k=3, pads=1, group=32),
    # the stem (C_in <= 4) + residual
    "stem": dict(c_in=3, c_mid=16, hw=16, k=3, pads=1),
    # the residual behind an activation: the 3x3 / depthwise / stem Conv itself
    # takes the Add, and its path reads the residual's copy from the shared
    # scratch (the dense path on AVX-512: 64 channels, 196 and 180 pixels, two
    # chunks, a ragged tile; else im2col accumulating)
    "3x3_dense": dict(c_in=32, c_mid=64, hw=14, k=3, pads=1, shortcut="Relu"),
    "3x3_dense_clip": dict(c_in=16, c_mid=128, hw=13, k=3, pads=1, act="Clip", shortcut="LeakyRelu"),
    "depthwise_copy": dict(c_in=8, c_mid=32, hw=12, k=3, pads=1, group=32, shortcut="Relu"),
    "stem_copy": dict(c_in=3, c_mid=16, hw=16, k=3, pads=1, shortcut="Relu"),
}


def header_arena(data: bytes) -> int:
    return convert.HEADER.unpack(data[:convert.HEADER.size])[6]


def run_minirt(data: bytes, feeds: dict, threads: int) -> np.ndarray:
    testing._session_lib()
    pkg = str(Path(registry_mod.resources.path("packaging", "python")))
    if pkg not in sys.path:
        sys.path.insert(0, pkg)
    import minirt

    so = minirt.SessionOptions()
    so.intra_op_num_threads = threads
    sess = minirt.InferenceSession(data, sess_options=so)
    try:
        return sess.run(None, feeds)[0]
    finally:
        sess.close()


ISAS = [None, "avx2", "sse"] if toolchain.host_abi() == "x86_64" else [None]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_in_place_blocks_match_onnxruntime(isa, name, monkeypatch):
    model, feeds = conv_block(**BLOCKS[name])
    plans = []
    real = convert.plan_memory
    with monkeypatch.context() as m:
        m.setattr(convert, "plan_memory", lambda *a: plans.append(real(*a)) or plans[-1])
        data, _ = testing.convert_model(model, feeds)
        m.setattr(convert, "_may_share", lambda *a, **k: False)
        fresh, _ = testing.convert_model(model, feeds)
    # Y took the residual's slot (one FusedConv with a residual), and the arena is no bigger
    assert [p.in_place for p in plans] == [1, 0]
    assert header_arena(data) <= header_arena(fresh)
    want = ortref.reference_session(model).run(None, feeds)[0]
    outs = [run_minirt(data, feeds, t) for t in (1, 2, 4)]
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4)
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    # and the fresh-buffer order agrees to the same tolerance
    np.testing.assert_allclose(run_minirt(fresh, feeds, 1), want, rtol=1e-4, atol=1e-4)


def test_runs_twice_the_same():
    # the residual's memory is overwritten by Y: a second run recomputes it
    model, feeds = conv_block(**BLOCKS["1x1_relu"])
    data, _ = testing.convert_model(model, feeds)
    testing._session_lib()
    import minirt

    sess = minirt.InferenceSession(data)
    try:
        a = sess.run(None, feeds)[0]
        b = sess.run(None, feeds)[0]
    finally:
        sess.close()
    assert a.tobytes() == b.tobytes()


# --- other builds: --tune size, --no-threads, ARM (NEON) under qemu ----------

BUILD_BLOCKS = ["1x1_kblocks", "1x1_linear", "1x1_leaky", "3x3_relu", "depthwise", "stem", "3x3_dense",
                "depthwise_copy"]

RUNNER = r"""
import json, sys
import numpy as np
import minirt
job = json.load(open(sys.argv[1]))
for name in job["names"]:
    feeds = dict(np.load(job["feeds"][name]))
    for t in (1, 2):
        so = minirt.SessionOptions()
        so.intra_op_num_threads = t
        s = minirt.InferenceSession(job["models"] + "/" + name + ".mrt", sess_options=so)
        np.save(job["out"] + f"/{name}_{t}.npy", s.run(None, feeds)[0])
        s.close()
"""


@pytest.fixture(scope="module")
def block_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("inplace-models")
    feeds = {}
    for name in BUILD_BLOCKS:
        model, feeds[name] = conv_block(**BLOCKS[name])
        onnx.save(model, root / f"{name}.onnx")
    return root, feeds


def _reference(models: Path, name: str, feeds: dict) -> np.ndarray:
    sess = ortref.reference_session(models / f"{name}.onnx")
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("kind", ["tune_size", "no_threads"])
def test_in_place_in_size_and_unthreaded_builds(block_models, kind, tmp_path):
    import json
    import subprocess

    from conftest import build

    models, feeds = block_models
    out = tmp_path / "out"
    build(models, out, **({"tune": "size"} if kind == "tune_size" else {"threads": False}))
    work = tmp_path / "work"
    work.mkdir()
    files = {}
    for name in BUILD_BLOCKS:
        files[name] = str(work / f"{name}_feeds.npz")
        np.savez(files[name], **feeds[name])
    job = work / "job.json"
    job.write_text(json.dumps({"names": BUILD_BLOCKS, "feeds": files, "models": str(out / "models"),
                               "out": str(work)}))
    (work / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(out / "linux" / toolchain.host_abi() / "python")}
    env.pop("MINIRT_LIBRARY", None)
    res = subprocess.run([sys.executable, str(work / "runner.py"), str(job)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in BUILD_BLOCKS:
        want = _reference(models, name, feeds[name])
        one, two = (np.load(work / f"{name}_{t}.npy") for t in (1, 2))
        np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4, err_msg=f"{kind} {name}")
        assert one.tobytes() == two.tobytes(), f"{kind} {name}"


@pytest.mark.parametrize("arch", ["qemu-aarch64", "qemu-armv7"])
def test_in_place_on_arm_under_qemu(block_models, arch, tmp_path):
    from test_android import build_runners, qemu_for, run_under_qemu

    qemu_for(arch)
    models, feeds = block_models
    mrt, runners, _ = build_runners(models, tmp_path / "out", keys=[arch])
    for name in BUILD_BLOCKS:
        want = _reference(models, name, feeds[name])
        (tmp_path / name).mkdir()
        raw = run_under_qemu(arch, runners[arch], mrt[name], [feeds[name]["X"]], tmp_path / name)
        got = np.frombuffer(raw[0], np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{arch} {name}")

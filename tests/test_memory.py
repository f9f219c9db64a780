"""Loading a model reads its file once: the weights are used in place from that one
buffer, so a process's peak resident memory grows by about the model's size, not two
or three times it (a read buffer, then the session's own copy). Measured as users
would, in a fresh process, with the kernel's VmHWM (peak RSS)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from minibuild import toolchain
from minibuild.pipeline import Options, run_build

ROWS, COLS = 8192, 1024  # a 32 MiB embedding table; the arena (4 rows out) is tiny

_PROBE = """
import ctypes, sys, numpy as np
import minirt

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

path, how = sys.argv[1], sys.argv[2]
ids = np.array([0, 5, 8191, 77], np.int64)
before = hwm()
if how == "python":
    s = minirt.InferenceSession(path)
    y = s.run(None, {s.get_inputs()[0].name: ids})[0]
    print(hwm() - before, float(y.sum()))
elif how == "file":  # C's one call: the file read into a block the session owns
    lib = minirt._load()
    create = lib.mrt_session_create_from_file
    create.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
    h, err = ctypes.c_void_p(), ctypes.create_string_buffer(256)
    assert create(path.encode(), ctypes.byref(h), err, 256) == 0, err.value
    y = np.empty((4, COLS), np.float32)
    assert lib.mrt_session_set_input(h, 0, ids.ctypes.data, ids.nbytes) == 0
    assert lib.mrt_session_run(h) == 0
    assert lib.mrt_session_get_output(h, 0, y.ctypes.data, y.nbytes) == 0
    print(hwm() - before, float(y.sum()))
    lib.mrt_session_destroy(h)
else:  # C's zero-copy way: the file mapped, the mapping borrowed (MRT_SESSION_BORROW_BUFFER)
    import mmap
    lib = minirt._load()
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    h, err = ctypes.c_void_p(), ctypes.create_string_buffer(256)
    assert lib.mrt_session_create(ctypes.c_void_p(addr), len(mm), 1, ctypes.byref(h), err, 256) == 0, err.value
    print(hwm() - before, 0.0)
""".replace("COLS", str(COLS))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("memory")
    (d / "models").mkdir()
    table = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="embed", axis=0)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, COLS])],
        [numpy_helper.from_array(table, "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(d / "models" / "embed.onnx"))
    run_build(Options(models=d / "models", out=d / "out", platforms=["linux"], abis=[toolchain.host_abi()]))
    root = d / "out" / "linux" / toolchain.host_abi()
    return root, float(table[[0, 5, 8191, 77]].sum())


@pytest.mark.parametrize("how", ["python", "file", "mapped"])
def test_loading_reads_the_model_once(built, how):
    root, want = built
    model = root / "models" / "embed.mrt"
    size = model.stat().st_size
    assert size > ROWS * COLS * 4
    res = subprocess.run([sys.executable, "-c", _PROBE, str(model), how], capture_output=True, text=True,
                         env={"PYTHONPATH": str(root / "python"), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    grown, got = res.stdout.split()
    # One copy of the model and a few MB of runtime; a second copy would be 2x.
    assert int(grown) < 1.25 * size, f"peak RSS grew {int(grown)} B loading a {size} B model"
    if how != "mapped":
        assert float(got) == pytest.approx(want, rel=1e-5)

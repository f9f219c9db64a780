"""mrt_session_run_with: one call that reads the inputs where the caller keeps
them (no copy into the session), runs, and copies the outputs out; the Python
binding's run() is built on it.

What it must keep: the session never writes to a caller's input (read-only
memory here, and a residual input the planner might otherwise reuse) and keeps
no pointer to it after the call (a plain run afterwards reads the session's own
input again); an input the plan also reads through a view, or one not aligned
to its element size, is copied in, and the results are the same either way;
sizes are checked before anything is read. The kernel suite reaches every
kernel through it with inputs that end at an unreadable page
(minibuild.testing.guarded), so no kernel reads past an input's end."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from onnx import helper

from minibuild import testing
from models import graph_model

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(77)
P, S = ctypes.c_void_p, ctypes.c_size_t


def session(model, feeds, threads=1):
    """A minirt InferenceSession of `model` on the all-kernels library."""
    minirt = testing.minirt_module()
    data, names = testing.convert_model(model, feeds)
    so = minirt.SessionOptions()
    so.intra_op_num_threads = threads
    return minirt.InferenceSession(data, sess_options=so), names


def run_with(sess, inputs, outputs):
    """mrt_session_run_with on raw addresses; returns the status."""
    lib = sess._lib
    ins = (P * len(inputs))(*[a for a, _ in inputs])
    in_n = (S * len(inputs))(*[n for _, n in inputs])
    outs = (P * len(outputs))(*[a for a, _ in outputs]) if outputs is not None else None
    out_n = (S * len(outputs))(*[n for _, n in outputs]) if outputs is not None else None
    return lib.mrt_session_run_with(sess._h, ins, in_n, outs, out_n)


def arena_input(sess, k=0):
    """The session's own memory of input k, as float32."""
    arg = sess.get_inputs()[k]
    ptr = sess._lib.mrt_session_input_data(sess._h, k)
    return np.ctypeslib.as_array((ctypes.c_float * (arg.nbytes // 4)).from_address(ptr)).reshape(arg.shape)


def output_now(sess, k=0):
    arg = sess.get_outputs()[k]
    ptr = sess._lib.mrt_session_output_data(sess._h, k)
    return np.ctypeslib.as_array((ctypes.c_float * (arg.nbytes // 4)).from_address(ptr)).reshape(arg.shape).copy()


def relu_model():
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    m = graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, {}, ["y"])
    return m, x


def viewed_model():
    """x is read directly by Relu and through a Reshape (a view: x's own memory)."""
    x = RNG.standard_normal((2, 12)).astype(np.float32)
    consts = {"shape": np.array([4, 6], np.int64)}
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["v"]), helper.make_node("Relu", ["v"], ["r"]),
             helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["s2"]),
             helper.make_node("Add", ["r", "s2"], ["y"])]
    return graph_model(nodes, {"x": x}, consts, ["y"]), x


def readonly(x: np.ndarray) -> np.ndarray:
    """A copy of x in pages the process may only read: a write faults."""
    block = mmap.mmap(-1, max(x.nbytes, 1))
    out = np.frombuffer(block, dtype=x.dtype, count=x.size).reshape(x.shape)
    out[...] = x
    testing.protect(block, 0, len(block), mmap.PROT_READ)
    return out


def test_input_is_read_in_place_and_not_kept():
    model, x = relu_model()
    sess, _ = session(model, {"x": x})
    old = -np.abs(RNG.standard_normal(x.shape).astype(np.float32)) - 1.0  # Relu of it: all zeros
    assert sess._lib.mrt_session_set_input(sess._h, 0, old.ctypes.data, old.nbytes) == 0
    out = np.empty_like(x)
    assert run_with(sess, [(x.ctypes.data, x.nbytes)], [(out.ctypes.data, out.nbytes)]) == 0
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    # Not copied in: the session's own input still holds what set_input put there ...
    np.testing.assert_array_equal(arena_input(sess), old)
    # ... and a plain run reads it again, not the caller's buffer.
    assert sess._lib.mrt_session_run(sess._h) == 0
    np.testing.assert_array_equal(output_now(sess), np.zeros_like(x))


def test_viewed_or_misaligned_input_is_copied_in():
    model, x = viewed_model()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess, _ = session(model, {"x": x})
    out = np.empty_like(want)
    assert run_with(sess, [(x.ctypes.data, x.nbytes)], [(out.ctypes.data, out.nbytes)]) == 0
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(arena_input(sess), x)  # the view reads the arena: x went there

    model, x = relu_model()
    sess, _ = session(model, {"x": x})
    raw = np.zeros(x.nbytes + 8, np.uint8)
    addr = raw.ctypes.data + (2 - raw.ctypes.data % 4) % 4 + 4  # 2 mod 4: not a float's alignment
    ctypes.memmove(addr, x.ctypes.data, x.nbytes)
    out = np.empty_like(x)
    assert run_with(sess, [(addr, x.nbytes)], [(out.ctypes.data, out.nbytes)]) == 0
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    np.testing.assert_array_equal(arena_input(sess), x)


@pytest.mark.parametrize("make", [relu_model, viewed_model])
def test_the_sessions_own_input_may_be_passed(make):
    """inputs[i] = mrt_session_input_data(i), as the Java binding passes for a heap
    buffer it copied in: read where it is (for the viewed input too, which would
    otherwise be copied onto itself), and the results are the model's."""
    model, x = make()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess, _ = session(model, {"x": x})
    arena_input(sess)[...] = x
    own = sess._lib.mrt_session_input_data(sess._h, 0)
    out = np.empty_like(want)
    assert run_with(sess, [(own, x.nbytes)], [(out.ctypes.data, out.nbytes)]) == 0
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(arena_input(sess), x)
    assert sess._lib.mrt_session_input_data(sess._h, 0) == own  # still the session's own memory


def test_inputs_are_never_written():
    """A residual Add on the graph input: the fused conv's in-place path may write
    into a dying residual's memory, never into a graph input's, least of all the
    caller's. The input lives in read-only pages; 1 and 2 threads, against onnxruntime."""
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    consts = {"W": (RNG.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
              "B": RNG.standard_normal(8).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = graph_model(nodes, {"x": x}, consts, ["y"])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ro = readonly(x)
    for threads in (1, 2):
        sess, _ = session(model, {"x": x}, threads)
        (got,) = sess.run(None, {"x": ro})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ro, x)


def test_sizes_are_checked_first():
    model, x = relu_model()
    sess, _ = session(model, {"x": x})
    out = np.empty_like(x)
    before = arena_input(sess).copy()
    assert run_with(sess, [(x.ctypes.data, x.nbytes - 4)], [(out.ctypes.data, out.nbytes)]) != 0
    msg = sess._lib.mrt_session_last_error(sess._h).decode()
    assert "input 'x'" in msg and str(x.nbytes) in msg and str(x.nbytes - 4) in msg
    assert run_with(sess, [(x.ctypes.data, x.nbytes)], [(out.ctypes.data, 8)]) != 0
    assert "output 'y'" in sess._lib.mrt_session_last_error(sess._h).decode()
    assert run_with(sess, [(0, x.nbytes)], [(out.ctypes.data, out.nbytes)]) != 0
    np.testing.assert_array_equal(arena_input(sess), before)  # nothing was copied in by the failed calls


def test_outputs_may_stay_in_the_session():
    model, x = relu_model()
    sess, _ = session(model, {"x": x})
    assert run_with(sess, [(x.ctypes.data, x.nbytes)], None) == 0
    np.testing.assert_array_equal(output_now(sess), np.maximum(x, 0))
    y = x * -2.0
    assert run_with(sess, [(y.ctypes.data, y.nbytes)], [(0, 0)]) == 0  # a NULL output: left in the session
    np.testing.assert_array_equal(output_now(sess), np.maximum(y, 0))


@pytest.mark.parametrize("form", ["readonly", "strided", "float64", "list"])
def test_python_run_takes_any_array_like(form):
    """The binding hands C-ordered, aligned float32 arrays over as they are and
    converts anything else first, as onnxruntime accepts them."""
    model, x = relu_model()
    sess, _ = session(model, {"x": x})
    if form == "readonly":
        feed = x.copy()
        feed.setflags(write=False)
    elif form == "strided":
        feed = np.repeat(x, 2, axis=3)[..., ::2]
        assert not feed.flags.c_contiguous
    elif form == "float64":
        feed = x.astype(np.float64)
    else:
        feed = x.tolist()
    (got,) = sess.run(None, {"x": feed})
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    with pytest.raises(ValueError, match="missing input 'x'"):
        sess.run(None, {})
    with pytest.raises(ValueError, match="unknown input"):
        sess.run(None, {"x": x, "z": x})
    with pytest.raises(ValueError, match="unknown output 'q'"):
        sess.run(["q"], {"x": x})
    with pytest.raises(ValueError, match="has shape"):
        sess.run(None, {"x": x[0]})

"""Run ONNX models through the whole pipeline on a library holding every kernel of
the registry: the harness for kernel tests and the ONNX conformance suite.

    from minibuild.testing import run_with_minirt
    outs = run_with_minirt(model, {"x": x})

The library is built once per process (SCons makes later builds no-ops); each
model is then only optimised and converted, which takes milliseconds.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from . import build, domains, manifest as manifest_mod, platforms, prepare, registry as registry_mod, toolchain

_LIB = None
_REGISTRY = None


def full_manifest(registry: registry_mod.Registry) -> manifest_mod.Manifest:
    """A manifest that asks for every (op, type) the registry has."""
    entries = [
        manifest_mod.Entry(e.domain, e.op, e.since_min, e.type_constraint, sorted(e.kernels))
        for e in sorted(registry.ops.values(), key=lambda e: e.key)
    ]
    return manifest_mod.Manifest(models=[], entries=entries)


def build_full_library(out: Path | None = None, abi: str | None = None) -> Path:
    """Build (or bring up to date) the all-kernels library for linux/<abi>; returns its path."""
    registry = registry_mod.load()
    out = Path(out or os.environ.get("MINIBUILD_TEST_LIB_DIR", Path(tempfile.gettempdir()) / f"minibuild-testlib-{os.getuid()}"))
    out.mkdir(parents=True, exist_ok=True)
    target = platforms.targets("linux", [abi or toolchain.host_abi()])[0]
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        plan, tb = build.plan_target(target, registry, full_manifest(registry), out / "build")
        build.run_scons([plan], out / "build")
    return tb.library


def _session_lib():
    global _LIB, _REGISTRY
    if _LIB is None:
        _REGISTRY = registry_mod.load()
        path = build_full_library()
        os.environ["MINIRT_LIBRARY"] = str(path)
        _LIB = path
    return _REGISTRY


def constant_feeds(model: onnx.ModelProto, feeds: dict, registry: registry_mod.Registry) -> list[str]:
    """The feeds a build would see as constants of the model, by what their consumers'
    registry entries say: an input index an entry lists in `constant_inputs` (shapes,
    axes, Expand's shape, Range's bounds). A type-family entry (`type_constraints`)
    lists all of them, so its other inputs stay run-time data, whatever their type
    (Gather's indices, Where's condition, Cast's input). For a one-type entry, an op
    the registry lacks, or a feed no node reads, every non-float feed is a constant,
    as shapes and axes are to the float32 kernels."""
    uses = {name: [] for name in feeds}
    for node in model.graph.node:
        entry = registry.get(domains.canonical(node.domain), node.op_type)
        for i, name in enumerate(node.input):
            if name in uses:
                uses[name].append((entry, i))
    out = []
    for name, value in feeds.items():
        non_float = not np.issubdtype(np.asarray(value).dtype, np.floating)
        if not uses[name]:
            const = non_float
        else:
            const = False
            for entry, i in uses[name]:
                typed = entry is not None and any(k.family for k in entry.kernels.values())
                const |= (entry is not None and i in entry.constant_inputs) or (non_float and not typed)
        if const:
            out.append(name)
    return out


def convert_model(model: onnx.ModelProto, feeds: dict, constant_inputs=None, registry=None) -> tuple[bytes, list]:
    """Optimise + convert `model` the way a build would. Inputs named in
    `constant_inputs` become build-time constants (default: `constant_feeds`, what the
    registry says its consumers need as constants). Returns the .mrt bytes and the
    remaining input names."""
    registry = registry or registry_mod.load()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if constant_inputs is None:
        constant_inputs = constant_feeds(model, feeds, registry)
    init_names = {i.name for i in model.graph.initializer}
    for name in constant_inputs:
        if name in feeds and name not in init_names:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(feeds[name]), name))
    runtime_inputs = [i.name for i in model.graph.input if i.name not in set(constant_inputs) | init_names]
    shapes = {k: tuple(np.asarray(feeds[k]).shape) for k in runtime_inputs if k in feeds}
    prepared = prepare.prepare(model, Path("test.onnx"), registry, input_shapes=shapes)
    return prepared.data, runtime_inputs


_LIBC = None


def minirt_module():
    """The Python binding from this checkout, on the all-kernels library."""
    import importlib
    import sys
    _session_lib()
    pkg = str(Path(registry_mod.resources.path("packaging", "python")))
    if pkg not in sys.path:
        sys.path.insert(0, pkg)
    return importlib.import_module("minirt")


def protect(block: mmap.mmap, offset: int, size: int, prot: int) -> None:
    """mprotect(2) on bytes [offset, offset + size) of an anonymous mapping
    (page-aligned): PROT_NONE (0) makes them unreadable, mmap.PROT_READ read-only."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(block))
    if _LIBC.mprotect(base + offset, size, prot) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")


def guarded(x: np.ndarray) -> np.ndarray:
    """A copy of `x` whose last byte is the last one before an unreadable page:
    the session reads inputs where they lie (mrt_session_run_with), so a kernel
    reading past an input's end faults here instead of reading the arena's
    padding. Its start is then aligned only as its byte size is."""
    x = np.require(x, requirements="C")  # keeps 0-d as 0-d
    if x.nbytes == 0 or not hasattr(mmap, "PROT_READ"):
        return x
    page = mmap.PAGESIZE
    span = -(-x.nbytes // page) * page + page
    block = mmap.mmap(-1, span)
    protect(block, span - page, page, 0)  # PROT_NONE
    out = np.frombuffer(block, dtype=x.dtype, count=x.size, offset=span - page - x.nbytes).reshape(x.shape)
    out[...] = x
    return out


def run_with_minirt(model: onnx.ModelProto, feeds: dict, constant_inputs=None, threads: int = 1) -> list[np.ndarray]:
    """Outputs of `model` on `feeds`, computed by minirt on `threads` threads, in graph output order."""
    registry = _session_lib()
    data, runtime_inputs = convert_model(model, feeds, constant_inputs, registry)
    minirt = minirt_module()
    so = minirt.SessionOptions()
    so.intra_op_num_threads = threads
    sess = minirt.InferenceSession(data, sess_options=so)
    try:
        return sess.run(None, {k: guarded(np.asarray(feeds[k])) for k in runtime_inputs})
    finally:
        sess.close()

"""minirt: Python binding of a minibuild-built runtime (ctypes + numpy).

Shaped like onnxruntime's API so code can switch with one import:

    import minirt
    sess = minirt.InferenceSession("model.mrt")
    # threads, as onnxruntime: so = minirt.SessionOptions(); so.intra_op_num_threads = 2
    #                          minirt.InferenceSession("model.mrt", sess_options=so)
    name = sess.get_inputs()[0].name
    (probs,) = sess.run(None, {name: x})
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._dtypes import DTYPES

__all__ = ["InferenceSession", "SessionOptions", "NodeArg", "MinirtError", "get_library_path", "version", "manifest_hash", "build_info"]

_MAX_DIMS = 6
_DTYPES = {value: np_type for value, (np_type, _) in DTYPES.items()}
_ORT_TYPE = {value: ort_type for value, (_, ort_type) in DTYPES.items()}


class MinirtError(RuntimeError):
    """A runtime call failed; the message is minirt's own."""

    def __init__(self, status: str, message: str):
        super().__init__(f"[{status}] {message}")
        self.status = status


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_uint32),
                ("dims", ctypes.c_int64 * _MAX_DIMS), ("nbytes", ctypes.c_size_t)]


def _library_name() -> str:
    if sys.platform == "darwin":
        return "libminirt.dylib"
    if sys.platform == "win32":
        return "minirt.dll"
    return "libminirt.so"


def get_library_path() -> str:
    """MINIRT_LIBRARY if set, else the library shipped beside this package."""
    env = os.environ.get("MINIRT_LIBRARY")
    if env:
        return env
    return str(Path(__file__).resolve().parent / _library_name())


_lib = None


class _SessionOptions(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint32), ("intra_op_num_threads", ctypes.c_int32),
                ("reserved", ctypes.c_uint32 * 6)]


_MAX_THREADS = 64  # MRT_MAX_THREADS
_BORROW_BUFFER = 1  # MRT_SESSION_BORROW_BUFFER
_ALIGN = 64         # MRT_ALIGN: the alignment a borrowed model needs


def _aligned(size: int) -> np.ndarray:
    """`size` uninitialised bytes starting on an _ALIGN boundary."""
    block = np.empty(size + _ALIGN, np.uint8)
    start = -block.ctypes.data % _ALIGN
    return block[start:start + size]


class SessionOptions:
    """Options of an InferenceSession, as onnxruntime.SessionOptions.

    intra_op_num_threads: threads one run uses, the caller's included. 0 (the
    default) and 1 run on the caller's thread only: minirt's default is one
    thread (size and footprint first), where onnxruntime's 0 means every core.
    A library built with --no-threads runs on one thread whatever is set here.
    """

    def __init__(self):
        self._intra_op_num_threads = 0

    @property
    def intra_op_num_threads(self) -> int:
        return self._intra_op_num_threads

    @intra_op_num_threads.setter
    def intra_op_num_threads(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"intra_op_num_threads must be an int, got {type(value).__name__}")
        if not 0 <= value <= _MAX_THREADS:
            raise ValueError(f"intra_op_num_threads must be 0..{_MAX_THREADS}, got {value}")
        self._intra_op_num_threads = value

    def __repr__(self) -> str:
        return f"SessionOptions(intra_op_num_threads={self._intra_op_num_threads})"


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = get_library_path()
    if not os.path.exists(path):
        raise ImportError(f"minirt library not found at {path}; build it with `minibuild` or set MINIRT_LIBRARY")
    lib = ctypes.CDLL(path)
    P, S, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sig = {
        "mrt_session_create": (I, [P, S, ctypes.c_uint32, ctypes.POINTER(P), ctypes.c_char_p, S]),
        "mrt_session_destroy": (None, [P]),
        "mrt_session_input_count": (S, [P]),
        "mrt_session_output_count": (S, [P]),
        "mrt_session_input_info": (I, [P, S, ctypes.POINTER(_TensorInfo)]),
        "mrt_session_output_info": (I, [P, S, ctypes.POINTER(_TensorInfo)]),
        "mrt_session_input_data": (P, [P, S]),
        "mrt_session_output_data": (P, [P, S]),
        "mrt_session_set_input": (I, [P, S, P, S]),
        "mrt_session_get_output": (I, [P, S, P, S]),
        "mrt_session_run": (I, [P]),
        "mrt_session_last_error": (ctypes.c_char_p, [P]),
        "mrt_status_string": (ctypes.c_char_p, [I]),
        "mrt_version": (ctypes.c_char_p, []),
        "mrt_build_manifest_hash": (ctypes.c_char_p, []),
    }
    # Newer than 0.1.0's library: looked up only where present.
    optional = {
        "mrt_session_create_with_options": (I, [P, S, ctypes.POINTER(_SessionOptions), ctypes.POINTER(P),
                                                ctypes.c_char_p, S]),
        "mrt_session_run_with": (I, [P, ctypes.POINTER(P), ctypes.POINTER(S), ctypes.POINTER(P), ctypes.POINTER(S)]),
    }
    for name, (res, args) in [*sig.items(), *((n, v) for n, v in optional.items() if hasattr(lib, n))]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def version() -> str:
    return _load().mrt_version().decode()


def manifest_hash() -> str:
    return _load().mrt_build_manifest_hash().decode()


def build_info() -> dict:
    """What minibuild recorded about this package's build (runtime version, manifest
    hash, models, wheel platform), read from _build_info.json; {} where the package
    was not installed from a minibuild wheel."""
    import json
    path = Path(__file__).resolve().parent / "_build_info.json"
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass(frozen=True)
class NodeArg:
    """An input or output: name, shape and type, as onnxruntime's NodeArg."""

    name: str
    shape: list
    type: str
    dtype: np.dtype
    nbytes: int


class InferenceSession:
    """A loaded model. `path_or_bytes` is a .mrt file path or its bytes;
    `sess_options` a SessionOptions (or anything with intra_op_num_threads, such
    as an onnxruntime.SessionOptions)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None):
        lib = _load()
        threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0) if sess_options is not None else 0
        if not 0 <= threads <= _MAX_THREADS:
            raise ValueError(f"intra_op_num_threads must be 0..{_MAX_THREADS}, got {threads}")
        # The model is read once into a 64-byte aligned buffer the session borrows:
        # its weights are used in place, and no second copy of the file ever exists.
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            src = memoryview(path_or_bytes).cast("B")
            model = _aligned(src.nbytes)
            model[:] = np.frombuffer(src, np.uint8)
        else:
            with open(os.fspath(path_or_bytes), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                model = _aligned(size)
                if f.readinto(memoryview(model)) != size or f.read(1):
                    raise MinirtError("IO_ERROR", f"{path_or_bytes}: the file changed while being read")
        err = ctypes.create_string_buffer(512)
        handle = ctypes.c_void_p()
        ptr = ctypes.c_void_p(model.ctypes.data)
        if hasattr(lib, "mrt_session_create_with_options"):
            opts = _SessionOptions(_BORROW_BUFFER, threads)
            status = lib.mrt_session_create_with_options(ptr, model.nbytes, ctypes.byref(opts), ctypes.byref(handle),
                                                         err, len(err))
        else:
            status = lib.mrt_session_create(ptr, model.nbytes, _BORROW_BUFFER, ctypes.byref(handle), err, len(err))
        if status != 0:
            raise MinirtError(lib.mrt_status_string(status).decode(), err.value.decode(errors="replace"))
        self._lib, self._h, self._model = lib, handle, model  # the session reads its weights from _model
        self._inputs = [self._info(lib.mrt_session_input_info, i) for i in range(lib.mrt_session_input_count(handle))]
        self._outputs = [self._info(lib.mrt_session_output_info, i) for i in range(lib.mrt_session_output_count(handle))]
        self._names = [i.name for i in self._inputs]
        self._output_names = [o.name for o in self._outputs]
        self._in_dims = [tuple(i.shape) for i in self._inputs]
        self._out_dims = [tuple(o.shape) for o in self._outputs]
        self._index = {o.name: k for k, o in enumerate(self._outputs)}
        # One call a run that reads the inputs where they lie, where the library has it.
        self._run_with = getattr(lib, "mrt_session_run_with", None)
        self._in_ptrs = ctypes.c_void_p * max(1, len(self._inputs))
        self._out_ptrs = ctypes.c_void_p * max(1, len(self._outputs))
        self._in_nbytes = (ctypes.c_size_t * max(1, len(self._inputs)))(*(i.nbytes for i in self._inputs))
        self._out_nbytes = (ctypes.c_size_t * max(1, len(self._outputs)))(*(o.nbytes for o in self._outputs))

    def _info(self, fn, i) -> NodeArg:
        info = _TensorInfo()
        self._check(fn(self._h, i, ctypes.byref(info)))
        dims = [int(info.dims[d]) for d in range(info.ndim)]
        return NodeArg(info.name.decode(), dims, _ORT_TYPE.get(info.dtype, "unknown"),
                       np.dtype(_DTYPES.get(info.dtype, np.uint8)), int(info.nbytes))

    def _check(self, status):
        if status != 0:
            raise MinirtError(self._lib.mrt_status_string(status).decode(),
                              self._lib.mrt_session_last_error(self._h).decode(errors="replace"))

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(self, output_names, input_feed: dict) -> list[np.ndarray]:
        # Lean on purpose: this path runs before and after every inference, when
        # the run has just pushed the interpreter out of the caches.
        feeds = []
        for arg, dims in zip(self._inputs, self._in_dims):
            x = input_feed.get(arg.name)
            if x is None:
                raise ValueError(f"missing input '{arg.name}' (shape {arg.shape}, {arg.type})")
            if not (type(x) is np.ndarray and x.dtype == arg.dtype and x.flags.c_contiguous and x.flags.aligned):
                # C order and the element type's alignment: the library reads it in place.
                x = np.require(np.asarray(x, dtype=arg.dtype), requirements="CA")  # keeps 0-d as 0-d
            if x.shape != dims:
                raise ValueError(f"input '{arg.name}' has shape {list(x.shape)}, the model was built for {arg.shape}")
            feeds.append(x)
        if len(input_feed) != len(feeds):
            raise ValueError(f"unknown input(s) {sorted(set(input_feed) - set(self._names))}; the model takes {self._names}")
        wanted = output_names or self._output_names
        results = {}
        for name in wanted:
            k = self._index.get(name)
            if k is None:
                raise ValueError(f"unknown output '{name}'; the model has {self._output_names}")
            results[name] = np.empty(self._out_dims[k], self._outputs[k].dtype)
        if self._run_with is not None:
            ins = self._in_ptrs(*[x.ctypes.data for x in feeds])
            outs = self._out_ptrs(*[ctypes.addressof(ctypes.c_char.from_buffer(results[o.name])) if o.name in results and o.nbytes
                                    else None for o in self._outputs])
            self._check(self._run_with(self._h, ins, self._in_nbytes, outs, self._out_nbytes))
            return [results[name] for name in wanted]
        for k, x in enumerate(feeds):  # a library older than mrt_session_run_with: copied in
            self._check(self._lib.mrt_session_set_input(self._h, k, x.ctypes.data, x.nbytes))
        self._check(self._lib.mrt_session_run(self._h))
        for name, out in results.items():
            self._check(self._lib.mrt_session_get_output(self._h, self._index[name], out.ctypes.data, out.nbytes))
        return [results[name] for name in wanted]

    def close(self):
        if getattr(self, "_h", None):
            self._lib.mrt_session_destroy(self._h)
            self._h = None
            self._model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

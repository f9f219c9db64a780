"""Verify: run every model on the built library and on onnxruntime with the same
seeded inputs, and compare.

Tolerance (float32): an output matches when
    max |minirt - onnxruntime|  <=  ATOL + RTOL * max |onnxruntime|
i.e. the error is judged against the output's own scale, because reordered float
sums (blocked GEMM, fused BN) differ from onnxruntime's order by rounding that
grows with the magnitude of the values and the depth of the network.

Models whose weights are constant-filled (the ONNX model-zoo "light" models fill
every weight with ConstantOfShape) get seeded random weights instead, in both
engines, so the comparison exercises real arithmetic rather than a constant.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import ortref, prepare, registry as registry_mod, scan, toolchain
from .errors import UnsupportedOpsError, VerifyError

ATOL = 1e-4
RTOL = 1e-3


@dataclass
class OutputCheck:
    name: str
    shape: list
    max_abs_err: float
    max_rel_err: float
    ref_max_abs: float
    ok: bool


@dataclass
class ModelCheck:
    model: str
    randomized_weights: int
    outputs: list[OutputCheck] = field(default_factory=list)
    minirt_ms: float = 0.0
    onnxruntime_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def ratio(self) -> float:
        return self.minirt_ms / self.onnxruntime_ms if self.onnxruntime_ms else float("nan")


def _weight_role(model: onnx.ModelProto, name: str) -> str:
    for n in model.graph.node:
        for i, inp in enumerate(n.input):
            if inp == name and n.op_type == "BatchNormalization":
                return {1: "bn_scale", 2: "bn_bias", 3: "bn_mean", 4: "bn_var"}.get(i, "other")
    return "weight"


def randomize_constant_weights(model: onnx.ModelProto, seed: int) -> tuple[onnx.ModelProto, int]:
    """Replace constant-filled float weights (ConstantOfShape outputs and uniform
    initializers) with seeded random values scaled to keep activations in range."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    replaced = {}
    keep_nodes = []
    for n in model.graph.node:
        if (n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits):
            value = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "value"), None)
            dtype = numpy_helper.to_array(value).dtype if value is not None else np.float32
            if np.issubdtype(dtype, np.floating):
                replaced[n.output[0]] = tuple(int(d) for d in inits[n.input[0]].reshape(-1))
                continue
        keep_nodes.append(n)
    for name, arr in inits.items():
        if np.issubdtype(arr.dtype, np.floating) and arr.size > 1 and np.all(arr == arr.reshape(-1)[0]):
            replaced[name] = arr.shape
    if not replaced:
        return model, 0
    new_inits = [i for i in model.graph.initializer if i.name not in replaced]
    for name in sorted(replaced):
        shape = replaced[name]
        role = _weight_role(model, name)
        if role in ("bn_scale", "bn_var"):
            value = rng.uniform(0.5, 1.5, size=shape)
        elif role in ("bn_bias", "bn_mean") or len(shape) <= 1:
            value = rng.uniform(-0.1, 0.1, size=shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            if len(shape) == 2 and fan_in != shape[1]:
                fan_in = shape[1]
            bound = np.sqrt(3.0 / max(min(fan_in, max(shape)), 1))
            value = rng.uniform(-bound, bound, size=shape)
        new_inits.append(numpy_helper.from_array(value.astype(np.float32), name))
    del model.graph.node[:]
    model.graph.node.extend(keep_nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(new_inits)
    # Weights that were ConstantOfShape outputs are now initializers the graph does not
    # list as inputs, which IR version 4 is the first to allow (onnx.checker holds to it).
    model.ir_version = max(model.ir_version, 4)
    # Inputs that were only there to feed removed shape constants stay harmless.
    return model, len(replaced)


def expose_logits(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Add the input of every Softmax/LogSoftmax that produces a graph output as an
    extra output: with random weights a deep network's softmax saturates to one-hot,
    which would compare equal whatever the arithmetic; its logits do not."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name for o in model.graph.output}
    added = []
    inferred = None
    for n in model.graph.node:
        if n.op_type in ("Softmax", "LogSoftmax") and n.output[0] in outputs and n.input[0] not in outputs:
            if inferred is None:  # the logits' type and shape, so the model still passes onnx.checker
                graph = onnx.shape_inference.infer_shapes(model).graph
                inferred = {vi.name: vi for vi in list(graph.value_info) + list(graph.input)}
            vi = inferred.get(n.input[0])
            if vi is None or not vi.type.tensor_type.HasField("shape"):
                continue
            model.graph.output.append(vi)
            added.append(n.input[0])
    return model, added


def _inputs_for(graph, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in graph.inputs:
        elem = vi.type.tensor_type.elem_type
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def median_ms(fn, runs: int) -> float:
    """Median wall time of `runs` calls after one warm-up call (verify and the benches)."""
    fn()  # warm-up: first-touch of memory, lazy packing
    times = []
    for _ in range(max(runs, 1)):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def compare(name: str, got: np.ndarray, ref: np.ndarray) -> OutputCheck:
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    if got.shape != ref.shape:
        return OutputCheck(name, list(ref.shape), float("inf"), float("inf"), 0.0, False)
    diff = np.abs(got64 - ref64)
    ref_max = float(np.max(np.abs(ref64))) if ref.size else 0.0
    max_abs = float(np.max(diff)) if ref.size else 0.0
    max_rel = float(np.max(diff / np.maximum(np.abs(ref64), 1e-6))) if ref.size else 0.0
    ok = bool(np.all(np.isfinite(got64))) and max_abs <= ATOL + RTOL * ref_max
    return OutputCheck(name, list(ref.shape), max_abs, max_rel, ref_max, ok)


def import_minirt(out: Path):
    pkg = Path(out) / "linux" / toolchain.host_abi() / "python"
    if not (pkg / "minirt" / "__init__.py").is_file():
        raise VerifyError(f"{out}: no host build to verify (looked for {pkg}/minirt); build first with "
                          f"`minibuild --models DIR --platform linux --abi {toolchain.host_abi()} --out {out}`")
    # Load this build's copy under its own module name: one process may verify
    # several builds, each with its own library beside its minirt package.
    name = f"minirt_{abs(hash(str(pkg.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, pkg / "minirt" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _convert(model, path, registry, opts, seed):
    prepared = prepare.prepare(model, path, registry, opts.fixed_dims, opts.input_shapes)
    return prepared.data, _inputs_for(prepared.model.graph, seed)


def verify_model(path: Path, minirt, registry, opts, seed: int, runs: int) -> ModelCheck:
    original = scan.read_model(path, root=opts.models)[0]  # external data only from inside the models folder
    model, n_random = randomize_constant_weights(original, seed)
    with_logits, added = expose_logits(model)
    try:
        data, feeds = _convert(with_logits, path, registry, opts, seed)
        model = with_logits
    except UnsupportedOpsError:
        # Exposing the logits blocked a fusion this build has no unfused kernel for.
        data, feeds = _convert(model, path, registry, opts, seed)
    sess = minirt.InferenceSession(data)
    ref_sess = ortref.reference_session(model)  # exact int8 even where onnxruntime's own GEMM saturates
    ort_inputs = {i.name for i in ref_sess.get_inputs()}
    ort_feeds = {k: v for k, v in feeds.items() if k in ort_inputs}
    got = sess.run(None, feeds)
    ref = ref_sess.run([o.name for o in sess.get_outputs()], ort_feeds)
    check = ModelCheck(Path(path).stem, n_random)
    check.outputs = [compare(o.name, g, r) for o, g, r in zip(sess.get_outputs(), got, ref)]
    check.minirt_ms = median_ms(lambda: sess.run(None, feeds), runs)
    check.onnxruntime_ms = median_ms(lambda: ref_sess.run(None, ort_feeds), runs)
    sess.close()
    return check


def run_verify(opts, json_path: Path | None = None, seed: int = 0, runs: int = 5) -> int:
    from rich.table import Table
    from .console import console
    registry = registry_mod.load()
    minirt = import_minirt(opts.out)
    checks = []
    for path in scan.find_models(opts.models):
        console.print(f"verify {path.name} ...", markup=False)
        checks.append(verify_model(path, minirt, registry, opts, seed, runs))
    table = Table(title=f"minirt vs onnxruntime (tolerance: max abs err <= {ATOL:g} + {RTOL:g} * max|ref|)")
    for col in ("model", "output", "max abs err", "max rel err", "max |ref|", "minirt ms", "ort ms", "ratio", "ok"):
        table.add_column(col)
    for c in checks:
        for k, o in enumerate(c.outputs):
            table.add_row(c.model if k == 0 else "", o.name, f"{o.max_abs_err:.3g}", f"{o.max_rel_err:.3g}",
                          f"{o.ref_max_abs:.3g}", f"{c.minirt_ms:.2f}" if k == 0 else "",
                          f"{c.onnxruntime_ms:.2f}" if k == 0 else "", f"{c.ratio:.2f}x" if k == 0 else "",
                          "yes" if o.ok else "[bold red]NO[/]")
    console.print(table)
    if json_path:
        doc = {"atol": ATOL, "rtol": RTOL, "seed": seed,
               "models": [dict(asdict(c), ok=c.ok, ratio=c.ratio) for c in checks]}
        from .fsutil import write_atomic
        write_atomic(Path(json_path), json.dumps(doc, indent=2))
    bad = [c.model for c in checks if not c.ok]
    if bad:
        console.print(f"mismatch beyond tolerance in: {', '.join(bad)}", markup=False)
        return 1
    return 0

"""ns per element of the vmath.h array functions through the real built kernels,
next to onnxruntime on the same one-op models, in the same run, interleaved.

    python bench/bench_vmath.py [--sizes 49,3136,1204224] [--ops silu,sigmoid,...]
                                [--isa sse,avx2,avx512] [--repeat 7] [--json F]

Each (op, size) is a model of a chain of K copies of the op on one float tensor
(K large for small tensors, so the Python call costs little per node; exp and
Gelu paired with a streaming op, see PAIRED), built
through the whole pipeline (optimise, convert) and run on the all-kernels
library of minibuild.testing, built from this checkout into bench-out/vmath/lib
(MINIBUILD_TEST_LIB_DIR overrides). minirt runs once per MINIRT_MAX_CPU_ISA cap
given (the cap is read when a session is prepared, so every copy of the vector
code is timed in one process); onnxruntime runs the same model on one thread.
The runs alternate (minirt caps, onnxruntime, again) and each figure is the best
of --repeat rounds, each round the median of a few calls. SiLU is also timed
against onnxruntime's com.microsoft QuickGelu (alpha 1), the op its optimiser
turns x * Sigmoid(x) into, and the time a chain of Sigmoid + Mul takes there.
Softmax runs over rows of 49 floats (the 7x7 planes) up to 3136 and of 128 (a
BERT attention row) above; LayerNormalization over rows of 256 (BERT-small's).

Not a test: timings on a shared machine are noisy; read ratios, repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
os.environ.setdefault("MINIBUILD_TEST_LIB_DIR", str(HERE.parent / "bench-out" / "vmath" / "lib"))

from minibuild import testing  # noqa: E402

OPS = ["exp", "sigmoid", "silu", "tanh", "erf", "gelu", "gelu_tanh", "hardswish", "softmax", "layernorm"]
SIZES = [49, 3136, 1204224]
# Inputs in the range each function sees in networks (and where it is not trivially 0/1).
SCALE = {"exp": 4.0, "sigmoid": 4.0, "silu": 4.0, "tanh": 3.0, "erf": 2.0, "gelu": 3.0, "gelu_tanh": 3.0,
         "hardswish": 4.0, "softmax": 4.0, "layernorm": 2.0}


def chain_len(n: int) -> int:
    # At least 8: minirt's binding copies the input in and the output out (into a
    # fresh array), which a lone node on 1.2M floats would pay as much as its work.
    return max(8, min(64, (1 << 17) // n))


def node_for(op: str, x: str, y: str, ort_silu: str = "") -> list:
    if op == "exp":
        return [helper.make_node("Exp", [x], [y])]
    if op == "sigmoid":
        return [helper.make_node("Sigmoid", [x], [y])]
    if op == "silu":
        if ort_silu == "quickgelu":
            return [helper.make_node("QuickGelu", [x], [y], domain="com.microsoft", alpha=1.0)]
        # x * Sigmoid(x): minibuild fuses it into SiLU (onnxruntime into QuickGelu).
        return [helper.make_node("Sigmoid", [x], [y + "_s"]), helper.make_node("Mul", [x, y + "_s"], [y])]
    if op == "tanh":
        return [helper.make_node("Tanh", [x], [y])]
    if op == "erf":
        return [helper.make_node("Erf", [x], [y])]
    if op == "gelu":
        return [helper.make_node("Gelu", [x], [y])]
    if op == "gelu_tanh":
        return [helper.make_node("Gelu", [x], [y], approximate="tanh")]
    if op == "hardswish":
        return [helper.make_node("HardSwish", [x], [y])]
    if op == "softmax":
        return [helper.make_node("Softmax", [x], [y], axis=-1)]
    if op == "layernorm":
        return [helper.make_node("LayerNormalization", [x, "g", "b"], [y], axis=-1, epsilon=1e-12)]
    raise SystemExit(f"unknown op {op}")


def shape_for(op: str, n: int) -> tuple:
    if op == "softmax":
        row = 49 if n <= 3136 else 128
        return (max(1, n // row), row)
    if op == "layernorm":  # BERT-small's rows of 256 (7x7's 49 below that)
        row = 49 if n < 256 else 256
        return (max(1, n // row), row)
    return (1, n)


# Functions whose chains would leave the range they are measured on: exp grows
# without bound, Gelu's negative side shrinks geometrically into denormals (its
# erf argument squared), which both engines then pay in microcode assists. Their
# chains put a streaming op between two copies (exp: Neg, exp(-|x|) staying in
# (0, 1]; Gelu: Sub 0.5, which settles near -0.67), so their figures are per pair.
PAIRED = {"exp": "Neg", "gelu": "Sub", "gelu_tanh": "Sub"}


def chain_model(op: str, n: int, k: int, ort_silu: str = "") -> onnx.ModelProto:
    """K copies of op in a chain, each on the one before: the functions are
    bounded or close to the identity there (PAIRED: see above)."""
    shape = shape_for(op, n)
    nodes, prev = [], "x"
    for i in range(k):
        y = f"y{i}"
        if i and op in PAIRED:
            ins = [prev] if PAIRED[op] == "Neg" else [prev, "half"]
            nodes.append(helper.make_node(PAIRED[op], ins, [y + "_p"]))
            prev = y + "_p"
        nodes += node_for(op, prev, y, ort_silu)
        prev = y
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])] if PAIRED.get(op) == "Sub" else []
    if op == "layernorm":
        rng = np.random.default_rng(3)
        inits = [helper.make_tensor(name, TensorProto.FLOAT, [shape[-1]], (rng.standard_normal(shape[-1]) * 0.1 + off)
                                    .astype(np.float32).tolist()) for name, off in (("g", 1.0), ("b", 0.0))]
    graph = helper.make_graph(nodes, f"{op}_{n}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)], inits)
    opsets = [helper.make_opsetid("", 20)]
    if ort_silu == "quickgelu":
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 9
    return m


def c_harness(lib_dir: Path, sizes: str, rounds: int) -> list[tuple]:
    """bench_vmath.c built with the flags and include folders the library's
    unary.c objects had (-O2, the target), run once: (name, n, [ns per copy])."""
    import subprocess
    plan = json.loads((lib_dir / "build" / "plan.json").read_text())
    target = plan["targets"][0]
    obj = next(o for o in target["objects"] if o["source"].endswith("kernels/unary.c"))
    flags = [f for f in obj["flags"] if not f.startswith(("-DMRT_OP_", "-ffile-prefix-map"))]
    exe = lib_dir / "bench_vmath"
    subprocess.run([*target["cc"], *flags, *[f"-I{d}" for d in target["include"]], str(HERE / "bench_vmath.c"),
                    "-o", str(exe), "-lm"], check=True)
    out = subprocess.run([str(exe), sizes, str(rounds)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        name, n, *ns = line.split()
        rows.append((name, int(n), [float(v) for v in ns]))
    return rows


def timed(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--isa", default="sse,avx2,avx512", help="MINIRT_MAX_CPU_ISA caps to time (avx512: no cap)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--functions-only", action="store_true", help="only the array functions (no onnxruntime)")
    args = ap.parse_args()

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1

    registry = testing._session_lib()
    pkg = str(Path(testing.registry_mod.resources.path("packaging", "python")))
    sys.path.insert(0, pkg)
    import minirt

    lib_dir = Path(os.environ["MINIBUILD_TEST_LIB_DIR"])
    print("array functions alone, ns per element (bench_vmath.c; short sizes: one call per row)")
    print(f"{'function':14} {'n':>8} {'baseline':>9} {'avx2':>9} {'avx512':>9}")
    crows = c_harness(lib_dir, args.sizes, args.repeat)
    for name, n, ns in crows:
        print(f"{name:14} {n:>8} " + " ".join(f"{v:>9.3f}" if v >= 0 else f"{'-':>9}" for v in ns), flush=True)
    print()

    if args.functions_only:
        return 0
    caps = [c for c in args.isa.split(",") if c]
    rng = np.random.default_rng(7)
    rows = []
    hdr = f"{'op':10} {'n':>8} " + " ".join(f"{'mrt ' + c:>11}" for c in caps) + f" {'ort':>9} {'best/ort':>8}"
    print("ns per element (best of rounds; one thread)\n" + hdr)
    for op in args.ops.split(","):
        for n in map(int, args.sizes.split(",")):
            k = chain_len(n)
            shape = shape_for(op, n)
            x = (rng.standard_normal(shape) * SCALE[op]).astype(np.float32)
            if op == "exp":
                x = -np.abs(x)
            model = chain_model(op, n, k)
            data, inputs = testing.convert_model(model, {"x": x}, [], registry)
            sessions = {}
            for c in caps:
                if c == "avx512":
                    os.environ.pop("MINIRT_MAX_CPU_ISA", None)
                else:
                    os.environ["MINIRT_MAX_CPU_ISA"] = c
                sessions[c] = minirt.InferenceSession(data)
            os.environ.pop("MINIRT_MAX_CPU_ISA", None)
            ort_sessions = {"ort": ort.InferenceSession(model.SerializeToString(), so,
                                                        providers=["CPUExecutionProvider"])}
            if op == "silu":
                qg = chain_model(op, n, k, "quickgelu")
                ort_sessions["ort QuickGelu"] = ort.InferenceSession(qg.SerializeToString(), so,
                                                                     providers=["CPUExecutionProvider"])
            want = ort_sessions["ort"].run(None, {"x": x})[-1]
            for c, s in sessions.items():
                got = s.run(None, {"x": x})[-1]
                err = float(np.abs(got - want).max())
                if err > 1e-4 * max(1.0, float(np.abs(want).max())):
                    raise SystemExit(f"{op} n={n} cap {c}: minirt differs from onnxruntime by {err}")
            calls = max(3, min(50, (1 << 22) // (n * k)))
            best = {name: float("inf") for name in [*sessions, *ort_sessions]}
            for _ in range(args.repeat):
                for c, s in sessions.items():
                    best[c] = min(best[c], timed(lambda: s.run(None, {"x": x}), calls))
                for name, s in ort_sessions.items():
                    best[name] = min(best[name], timed(lambda: s.run(None, {"x": x}), calls))
            ns = {name: t / (n * k) * 1e9 for name, t in best.items()}
            fastest = min(ns[c] for c in caps)
            line = f"{op:10} {n:>8} " + " ".join(f"{ns[c]:>11.3f}" for c in caps) + \
                f" {ns['ort']:>9.3f} {fastest / ns['ort']:>8.2f}"
            if "ort QuickGelu" in ns:
                line += f"   ort QuickGelu {ns['ort QuickGelu']:.3f} (best/QuickGelu {fastest / ns['ort QuickGelu']:.2f})"
            print(line, flush=True)
            rows.append({"op": op, "n": n, "chain": k, "ns_per_element": ns})
            for s in sessions.values():
                s.close()
    if args.json:
        args.json.write_text(json.dumps({"array_functions": [{"function": f, "n": n, "ns_per_element": dict(
            zip(["baseline", "avx2", "avx512"], ns))} for f, n, ns in crows], "ops": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

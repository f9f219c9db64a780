"""Threads: minirt and onnxruntime at 1 and 2 threads, in the same run.

    python bench/bench_threads.py [--runs 20] [--rounds 5] [--out bench-out/threads]
                                  [--models mobilenet_v2,light_resnet50] [--json F]

Builds a runtime (linux, host ABI) for MobileNetV2 (tests/models.py, 224x224) and
the ResNet-50 of the onnx wheel's light models (their ConstantOfShape weights
replaced by seeded random ones and the softmax's logits made an output, as
`minibuild verify` does, so the max abs diff printed against onnxruntime, over
every output, means something), then per thread count times both
engines on the same seeded input. The engines are interleaved in blocks of --runs
runs, --rounds times, so load on a shared machine hits both alike; the numbers
are medians over every run. The 1-thread phase runs before any 2-thread session
exists (an idle onnxruntime pool spins and would slow the other engine), and a
short pause between blocks lets each engine's spinning workers park.

Prints per model and thread count: minirt ms, onnxruntime ms, minirt / ort at the
same thread count, and each engine's speed-up from 1 to 2 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import models  # noqa: E402
from minibuild import toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import expose_logits, import_minirt, randomize_constant_weights  # noqa: E402


def feeds_for(path: Path) -> dict:
    rng = np.random.default_rng(0)
    m = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    out = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def time_block(fn, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="runs per block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per engine (interleaved)")
    ap.add_argument("--out", type=Path, default=Path("bench-out/threads"))
    ap.add_argument("--models", default="mobilenet_v2,light_resnet50")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort

    ort.set_default_logger_severity(3)

    src = args.out / "models"
    src.mkdir(parents=True, exist_ok=True)
    wanted = args.models.split(",")
    for name in wanted:
        if name == "mobilenet_v2":
            if not (src / "mobilenet_v2.onnx").exists():
                onnx.save(models.mobilenet_v2(), str(src / "mobilenet_v2.onnx"))
        else:
            (p,) = [p for p in models.light_model_paths() if Path(p).stem == name]
            model, _ = randomize_constant_weights(onnx.load(str(p)), seed=0)
            # With random weights the softmax saturates to one-hot: compare the logits too.
            model, _ = expose_logits(model)
            # Weights listed as graph inputs too are not constants to onnxruntime
            # (no folding, no prepacking): minirt's build treats them as constants.
            inits = {i.name for i in model.graph.initializer}
            keep = [i for i in model.graph.input if i.name not in inits]
            del model.graph.input[:]
            model.graph.input.extend(keep)
            onnx.save(model, str(src / f"{name}.onnx"))
    opts = Options(models=src, out=args.out / "build", platforms=["linux"], abis=[toolchain.host_abi()])
    run_build(opts)
    minirt = import_minirt(opts.out)

    thread_counts = [int(t) for t in args.threads.split(",")]
    results = {}
    for threads in thread_counts:
        for name in wanted:
            feeds = feeds_for(src / f"{name}.onnx")
            so = minirt.SessionOptions()
            so.intra_op_num_threads = threads
            ms = minirt.InferenceSession(str(opts.out / "models" / f"{name}.mrt"), sess_options=so)
            oo = ort.SessionOptions()
            oo.intra_op_num_threads = threads
            oo.inter_op_num_threads = 1
            os_ = ort.InferenceSession(str(src / f"{name}.onnx"), sess_options=oo, providers=["CPUExecutionProvider"])
            engines = {"minirt": lambda: ms.run(None, feeds), "onnxruntime": lambda: os_.run(None, feeds)}
            got = {k: [np.asarray(o) for o in f()] for k, f in engines.items()}  # warm-up, and a sanity check
            err = max(float(np.max(np.abs(a - b))) for a, b in zip(got["minirt"], got["onnxruntime"]))
            scale = max(float(np.max(np.abs(b))) for b in got["onnxruntime"])
            times = {k: [] for k in engines}
            for _ in range(args.rounds):
                for k, f in engines.items():
                    time.sleep(0.05)  # let the other engine's spinning workers park
                    times[k] += time_block(f, args.runs)
            med = {k: statistics.median(v) for k, v in times.items()}
            results[(name, threads)] = med
            print(f"{name:16} {threads}T  minirt {med['minirt']:8.2f} ms  onnxruntime {med['onnxruntime']:8.2f} ms  "
                  f"ratio {med['minirt'] / med['onnxruntime']:5.2f}  max abs diff {err:.2e} (max |y| {scale:.2e})", flush=True)
            del ms, os_, engines

    print()
    print(f"{'model':16} {'T':>2} {'minirt ms':>10} {'ort ms':>9} {'mrt/ort':>8} {'mrt/ort@1T':>11} {'speed-up mrt':>13} {'speed-up ort':>13}")
    rows = []
    for (name, threads), med in results.items():
        one = results.get((name, 1))
        row = {"model": name, "threads": threads, "minirt_ms": med["minirt"], "onnxruntime_ms": med["onnxruntime"],
               "ratio": med["minirt"] / med["onnxruntime"]}
        if one:
            row["ratio_vs_ort_1t"] = med["minirt"] / one["onnxruntime"]
            row["minirt_speedup"] = one["minirt"] / med["minirt"]
            row["onnxruntime_speedup"] = one["onnxruntime"] / med["onnxruntime"]
        rows.append(row)
        print(f"{name:16} {threads:>2} {med['minirt']:10.2f} {med['onnxruntime']:9.2f} {row['ratio']:8.2f} "
              f"{row.get('ratio_vs_ort_1t', float('nan')):11.2f} {row.get('minirt_speedup', float('nan')):13.2f} "
              f"{row.get('onnxruntime_speedup', float('nan')):13.2f}")
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

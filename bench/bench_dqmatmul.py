"""The fused dynamic-quantised MatMul (com.microsoft DynamicQuantizeMatMul) against
the unfused chain it replaces, on BERT-small quantised by quantize_dynamic.

    python bench/bench_dqmatmul.py [--runs 50] [--out bench-out/dqmatmul] [--json F]

Exports tests/exporters.py's BERT-small (hidden 128, 2 layers, seq 64, random
weights; cached), quantises it with onnxruntime.quantization.quantize_dynamic (int8
weights, uint8 activations), and builds it twice for linux (host ABI): as minibuild
builds it (every DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add) chain
fused) and with the fusion switched off (the chain runs node by node). Each build,
the float model on minirt and onnxruntime on the float and int8 models are timed on
the same inputs, one thread each (median of --runs after a warm-up); prints latency,
ratios, each int8 build's deviation from onnxruntime and the library sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402

import exporters as ex  # noqa: E402
from minibuild import optimize, toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt, median_ms  # noqa: E402


def _build(models: Path, out: Path, spec, fuse: bool):
    keep = optimize.fuse_dynamic_matmul
    if not fuse:
        optimize.fuse_dynamic_matmul = lambda g, available: False
    try:
        built = run_build(Options(models=models, out=out, platforms=["linux"], abis=[toolchain.host_abi()],
                                  fixed_dims=spec.fixed_dims()))
    finally:
        optimize.fuse_dynamic_matmul = keep
    ops = {e.op for e in built.scan.manifest.entries}
    assert ("DynamicQuantizeMatMul" in ops) == fuse and ("MatMulInteger" in ops) != fuse, sorted(ops)
    return built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("bench-out/dqmatmul"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    spec = ex.SPECS["bert_small"]
    folder, _ = ex.export_cached(spec, Path(os.environ.get("MINIBUILD_EXPORT_CACHE") or args.out / "exports"))
    src = args.out / "models"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for f in ex.model_files(folder, "bert_small"):
        shutil.copyfile(f, src / f.name)
    quantize_dynamic(str(src / "bert_small.onnx"), str(src / "bert_small_int8.onnx"), weight_type=QuantType.QInt8)
    feeds = spec.feeds(np.random.default_rng(0))

    builds = {"fused": _build(src, args.out / "fused", spec, True),
              "unfused": _build(src, args.out / "unfused", spec, False)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rows = {}
    print(f"{'engine / model':34} {'ms':>9}  max err / range")
    for label, built in builds.items():
        minirt = import_minirt(args.out / label)
        for model in ("bert_small", "bert_small_int8"):
            if label == "unfused" and model == "bert_small":
                continue  # the float model builds the same either way
            sess = minirt.InferenceSession(str(built.model_files[model]))
            ref = ort.InferenceSession(str(src / f"{model}.onnx"), so, providers=["CPUExecutionProvider"])
            outs = [o.name for o in sess.get_outputs()]
            res = ex.compare_outputs(outs, sess.run(None, feeds), ref.run(outs, feeds))
            t = median_ms(lambda: sess.run(None, feeds), args.runs)
            sess.close()
            worst = max(r.rel for r in res)
            name = f"minirt {label} {model}" if model.endswith("int8") else f"minirt {model}"
            rows[name] = {"ms": t, "max_err_over_range": worst}
            print(f"{name:34} {t:9.3f}  {worst:.2e}", flush=True)
    for model in ("bert_small", "bert_small_int8"):
        ref = ort.InferenceSession(str(src / f"{model}.onnx"), so, providers=["CPUExecutionProvider"])
        t = median_ms(lambda: ref.run(None, feeds), args.runs)
        rows[f"onnxruntime {model}"] = {"ms": t}
        print(f"{'onnxruntime ' + model:34} {t:9.3f}", flush=True)
    fused, unfused = rows["minirt fused bert_small_int8"]["ms"], rows["minirt unfused bert_small_int8"]["ms"]
    o_int8 = rows["onnxruntime bert_small_int8"]["ms"]
    sizes = {label: b.targets[0].library.stat().st_size for label, b in builds.items()}
    print(f"\nfused / unfused {fused / unfused:.2f}x; fused vs onnxruntime int8 {fused / o_int8:.2f}x, "
          f"unfused vs onnxruntime int8 {unfused / o_int8:.2f}x; "
          f"library {sizes['fused']:,} B fused, {sizes['unfused']:,} B unfused (both models)")
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": args.runs, "results": rows,
                                         "library_bytes": sizes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

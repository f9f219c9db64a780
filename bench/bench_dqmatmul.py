"""The fused dynamic-quantised MatMul (com.microsoft DynamicQuantizeMatMul) against
the unfused chain it replaces, on BERT-small quantised by quantize_dynamic.

    python bench/bench_dqmatmul.py [--runs 50] [--out bench-out/dqmatmul] [--json F]
                                   [--gemm 128x768x768,128x768x3072]

Exports tests/exporters.py's BERT-small (hidden 128, 2 layers, seq 64, random
weights; cached), quantises it with onnxruntime.quantization.quantize_dynamic (int8
weights, uint8 activations), and builds it twice for linux (host ABI): as minibuild
builds it (every DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add) chain
fused) and with the fusion switched off (the chain runs node by node). Each build,
the float model on minirt and onnxruntime on the float and int8 models are timed on
the same inputs, one thread each (median of --runs after a warm-up); prints latency,
ratios, each int8 build's deviation from onnxruntime and the library sizes. Each
--gemm shape MxKxN adds one float MatMul (+ bias) of a constant [K, N] weight,
quantised the same way, timed the same way.
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
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

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
    ap.add_argument("--gemm", default="128x768x768,128x768x3072")
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
    feeds = {m: spec.feeds(np.random.default_rng(0)) for m in ("bert_small", "bert_small_int8")}
    rng = np.random.default_rng(0)
    for shape in filter(None, args.gemm.split(",")):
        m, k, n = (int(v) for v in shape.split("x"))
        name = f"gemm_{m}x{k}x{n}"
        g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
                              name, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array((rng.standard_normal((k, n)) * k ** -0.5).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src / f"{name}.onnx")
        quantize_dynamic(str(src / f"{name}.onnx"), str(src / f"{name}_int8.onnx"), weight_type=QuantType.QInt8)
        feeds[name] = feeds[f"{name}_int8"] = {"a": rng.standard_normal((m, k)).astype(np.float32)}

    builds = {"fused": _build(src, args.out / "fused", spec, True),
              "unfused": _build(src, args.out / "unfused", spec, False)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rows = {}
    print(f"{'engine / model':34} {'ms':>9}  max err / range")
    for label, built in builds.items():
        minirt = import_minirt(args.out / label)
        for model, f in feeds.items():
            if label == "unfused" and not model.endswith("int8"):
                continue  # the float models build the same either way
            sess = minirt.InferenceSession(str(built.model_files[model]))
            ref = ort.InferenceSession(str(src / f"{model}.onnx"), so, providers=["CPUExecutionProvider"])
            outs = [o.name for o in sess.get_outputs()]
            res = ex.compare_outputs(outs, sess.run(None, f), ref.run(outs, f))
            t = median_ms(lambda: sess.run(None, f), args.runs)
            sess.close()
            worst = max(r.rel for r in res)
            name = f"minirt {label} {model}" if model.endswith("int8") else f"minirt {model}"
            rows[name] = {"ms": t, "max_err_over_range": worst}
            print(f"{name:34} {t:9.3f}  {worst:.2e}", flush=True)
    for model, f in feeds.items():
        ref = ort.InferenceSession(str(src / f"{model}.onnx"), so, providers=["CPUExecutionProvider"])
        t = median_ms(lambda: ref.run(None, f), args.runs)
        rows[f"onnxruntime {model}"] = {"ms": t}
        print(f"{'onnxruntime ' + model:34} {t:9.3f}", flush=True)
    print()
    for model in (m for m in feeds if m.endswith("int8")):
        fused, unfused = rows[f"minirt fused {model}"]["ms"], rows[f"minirt unfused {model}"]["ms"]
        o_int8 = rows[f"onnxruntime {model}"]["ms"]
        print(f"{model}: fused / unfused {fused / unfused:.2f}x; fused vs onnxruntime int8 {fused / o_int8:.2f}x, "
              f"unfused vs onnxruntime int8 {unfused / o_int8:.2f}x")
    sizes = {label: b.targets[0].library.stat().st_size for label, b in builds.items()}
    print(f"library {sizes['fused']:,} B fused, {sizes['unfused']:,} B unfused (all models)")
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": args.runs, "results": rows,
                                         "library_bytes": sizes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dynamic int8 against float32, on minirt and onnxruntime, one thread each.

    python bench/bench_int8.py [--runs 50] [--out bench-out/int8] [--json F]
                               [--gemm 128x768x768,128x768x3072]

Exports tests/exporters.py's BERT-small (hidden 128, 2 layers, seq 64, random
weights; cached), quantises it with onnxruntime.quantization.quantize_dynamic (int8
weights, uint8 activations: DynamicQuantizeLinear + MatMulInteger), and adds one
GEMM model pair per --gemm shape (MxKxN: float MatMul with constant B, and
MatMulInteger uint8 x int8 with constant B and zero points) to measure the integer
GEMM against the float one in GOPS (2*M*K*N per run). Everything is built in one
minibuild run (linux, host ABI); each model is timed on both engines on the same
inputs: median of --runs after a warm-up. Prints latency, ratios and the int8
model's deviation from onnxruntime.
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
from minibuild import toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt, median_ms  # noqa: E402




def gemm_models(m: int, k: int, n: int, rng) -> dict:
    """name -> (model, feeds): float MatMul and MatMulInteger of one shape."""
    out = {}
    b = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "f",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [numpy_helper.from_array(b, "b")])
    out[f"gemm_f32_{m}x{k}x{n}"] = (g, {"a": rng.standard_normal((m, k)).astype(np.float32)})
    bq = rng.integers(-128, 128, (k, n)).astype(np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])], "q",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
                          [numpy_helper.from_array(bq, "b"), numpy_helper.from_array(np.uint8(131), "za"),
                           numpy_helper.from_array(np.int8(0), "zb")])
    out[f"gemm_u8s8_{m}x{k}x{n}"] = (g, {"a": rng.integers(0, 256, (m, k)).astype(np.uint8)})
    return {name: (helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)]), f) for name, (gr, f) in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("bench-out/int8"))
    ap.add_argument("--gemm", default="128x768x768,128x768x3072,64x128x512")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = args.out / "models"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    spec = ex.SPECS["bert_small"]
    folder, _ = ex.export_cached(spec, Path(os.environ.get("MINIBUILD_EXPORT_CACHE") or args.out / "exports"))
    for f in ex.model_files(folder, "bert_small"):
        shutil.copyfile(f, src / f.name)
    quantize_dynamic(str(src / "bert_small.onnx"), str(src / "bert_small_int8.onnx"), weight_type=QuantType.QInt8)
    feeds = {"bert_small": spec.feeds(np.random.default_rng(0))}
    feeds["bert_small_int8"] = feeds["bert_small"]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.gemm.split(",") if s]
    rng = np.random.default_rng(0)
    flops = {}
    for m, k, n in shapes:
        for name, (model, f) in gemm_models(m, k, n, rng).items():
            onnx.save(model, src / f"{name}.onnx")
            feeds[name] = f
            flops[name] = 2.0 * m * k * n

    built = run_build(Options(models=src, out=args.out / "build", platforms=["linux"], abis=[toolchain.host_abi()],
                              fixed_dims=spec.fixed_dims()))
    minirt = import_minirt(args.out / "build")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rows = {}
    print(f"{'model':26} {'minirt ms':>10} {'ort ms':>10} {'ratio':>7} {'minirt GOPS':>12} {'ort GOPS':>9}  max err / range")
    for name in sorted(feeds, key=lambda s: (not s.startswith("bert"), s)):
        f = feeds[name]
        sess = minirt.InferenceSession(str(built.model_files[name]))
        ref = ort.InferenceSession(str(src / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
        outs = [o.name for o in sess.get_outputs()]
        res = ex.compare_outputs(outs, sess.run(None, f), ref.run(outs, f))
        t_mrt = median_ms(lambda: sess.run(None, f), args.runs)
        t_ort = median_ms(lambda: ref.run(None, f), args.runs)
        sess.close()
        worst = max(r.rel for r in res)
        g_mrt = flops[name] / t_mrt / 1e6 if name in flops else None
        g_ort = flops[name] / t_ort / 1e6 if name in flops else None
        rows[name] = {"minirt_ms": t_mrt, "onnxruntime_ms": t_ort, "ratio": t_mrt / t_ort, "minirt_gops": g_mrt,
                      "onnxruntime_gops": g_ort, "max_err_over_range": worst}
        gs = f"{g_mrt:12.1f} {g_ort:9.1f}" if g_mrt else f"{'':12} {'':9}"
        print(f"{name:26} {t_mrt:10.3f} {t_ort:10.3f} {t_mrt / t_ort:6.2f}x {gs}  {worst:.2e}", flush=True)
    b, q = rows["bert_small"], rows["bert_small_int8"]
    print(f"\nBERT-small int8 vs float: minirt {q['minirt_ms'] / b['minirt_ms']:.2f}x, "
          f"onnxruntime {q['onnxruntime_ms'] / b['onnxruntime_ms']:.2f}x; "
          f"minirt int8 vs onnxruntime int8 {q['ratio']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": args.runs, "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Latency of transformer encoders on minirt against onnxruntime, one thread each.

    python bench/bench_transformers.py [--runs 50] [--out bench-out/transformers]
                                       [--models bert_small,vit_small] [--json F]

Exports the models the exporter tests use (tests/exporters.py: BERT-small,
hidden 128, 2 layers, seq 64 with a padded attention mask; ViT, 64x64 image, patch
16, hidden 128, 2 layers; random weights, torch.onnx.export, TorchScript exporter
unless the name ends in _dynamo), builds one runtime for them (linux, host ABI),
then times both engines in this process on the same seeded inputs: median of
--runs after a warm-up, and the ratio minirt/onnxruntime (< 1: minirt is faster).
Any other name of tests/exporters.py's SPECS works too (e.g. whisper_encoder).
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
from minibuild import toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt, median_ms  # noqa: E402




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("bench-out/transformers"))
    ap.add_argument("--models", default="bert_small,vit_small", help="comma list of tests/exporters.py SPECS names")
    ap.add_argument("--json", type=Path, help="write results here")
    args = ap.parse_args()

    import onnxruntime as ort

    names = args.models.split(",")
    unknown = [n for n in names if n not in ex.SPECS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ex.SPECS)}")
    src = args.out / "models"
    src.mkdir(parents=True, exist_ok=True)
    for name in names:
        folder, seconds = ex.export_cached(ex.SPECS[name], args.out / "exports")
        print(f"export {name}: {'cached' if not seconds else f'{seconds:.1f}s'}", flush=True)
        for f in ex.model_files(folder, name):
            shutil.copyfile(f, src / f.name)

    opts = Options(models=src, out=args.out / "build", platforms=["linux"], abis=[toolchain.host_abi()])
    built = run_build(opts)
    minirt = import_minirt(opts.out)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rows = []
    print(f"{'model':26} {'minirt ms':>10} {'ort ms':>10} {'ratio':>7}  max err / range")
    for name in names:
        spec = ex.SPECS[name]
        feeds = spec.feeds(np.random.default_rng(0))
        sess = minirt.InferenceSession(str(built.model_files[name]))
        ref = ort.InferenceSession(str(src / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
        outs = [o.name for o in sess.get_outputs()]
        results = ex.compare_outputs(outs, sess.run(None, feeds), ref.run(outs, feeds))
        t_mrt = median_ms(lambda: sess.run(None, feeds), args.runs)
        t_ort = median_ms(lambda: ref.run(None, feeds), args.runs)
        sess.close()
        worst = max(r.rel for r in results)
        ok = all(r.ok for r in results)
        rows.append({"model": name, "minirt_ms": t_mrt, "onnxruntime_ms": t_ort, "ratio": t_mrt / t_ort,
                     "max_err_over_range": worst, "ok": ok})
        print(f"{name:26} {t_mrt:10.3f} {t_ort:10.3f} {t_mrt / t_ort:6.2f}x  {worst:.2e}{'' if ok else '  MISMATCH'}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": args.runs, "results": rows}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Latency of minirt against onnxruntime in the same run, one thread each.

    python bench/bench_latency.py [--runs 20] [--out bench-out] [--models light,mobilenet_v2]

Builds a runtime for the nine ONNX model-zoo light models and MobileNetV2 (linux,
host ABI), then times both engines on the same seeded inputs (median of --runs
after a warm-up) and prints the ratio minirt/onnxruntime (< 1 means minirt is faster).
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

import onnx  # noqa: E402

import models  # noqa: E402
from minibuild import registry as registry_mod, toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt, verify_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--models", default="light,mobilenet_v2", help="comma list: light, mobilenet_v2")
    ap.add_argument("--json", type=Path, help="write results here")
    args = ap.parse_args()

    src = args.out / "models"
    src.mkdir(parents=True, exist_ok=True)
    wanted = args.models.split(",")
    if "light" in wanted:
        for p in models.light_model_paths():
            shutil.copy(p, src)
    if "mobilenet_v2" in wanted and not (src / "mobilenet_v2.onnx").exists():
        onnx.save(models.mobilenet_v2(), str(src / "mobilenet_v2.onnx"))

    opts = Options(models=src, out=args.out / "build", platforms=["linux"], abis=[toolchain.host_abi()])
    run_build(opts)
    minirt = import_minirt(opts.out)
    reg = registry_mod.load()
    rows = []
    print(f"{'model':28} {'minirt ms':>10} {'ort ms':>10} {'ratio':>7}  max abs err")
    for path in sorted(src.glob("*.onnx")):
        c = verify_model(path, minirt, reg, opts, seed=0, runs=args.runs)
        err = max(o.max_abs_err for o in c.outputs)
        rows.append({"model": c.model, "minirt_ms": c.minirt_ms, "onnxruntime_ms": c.onnxruntime_ms,
                     "ratio": c.ratio, "ok": c.ok})
        print(f"{c.model:28} {c.minirt_ms:10.2f} {c.onnxruntime_ms:10.2f} {c.ratio:6.2f}x  {err:.2e}{'' if c.ok else '  MISMATCH'}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "results": rows}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

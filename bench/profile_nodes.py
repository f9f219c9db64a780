"""Per-node latency of minirt next to onnxruntime's profiler, one thread each
(or --threads N for both: each node's time is then its wall time on N threads).

    python bench/profile_nodes.py MODEL.onnx [--runs 20] [--out prof-out] [--top 25] [--threads 1]

Builds a runtime for the model (linux, host ABI), links bench/profile_nodes.c
statically with the same objects and flags as the library (so the shipped
library has no timing hooks), converts the model with the same seeded random
weights `minibuild verify` uses, and times every node. onnxruntime runs the
same model with profiling on; the report lists per-op-type totals of both and
the slowest minirt nodes with their onnxruntime counterpart (matched by name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent

import onnx  # noqa: E402

from minibuild import registry as registry_mod, toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild import verify  # noqa: E402


def build_harness(out: Path, build_out: Path) -> Path:
    plan = json.loads((build_out / "build" / "plan.json").read_text())
    target = plan["targets"][0]
    objdir = out / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    inc = [f"-I{d}" for d in target["include"]]
    objs = []
    procs = []
    for o in target["objects"]:
        dst = objdir / (o["target"].replace("/", "_"))
        procs.append(subprocess.Popen([*target["cc"], *o["flags"], *inc, "-c", o["source"], "-o", str(dst)]))
        objs.append(str(dst))
        if len(procs) >= 4:
            for p in procs:
                if p.wait():
                    raise SystemExit("compile failed")
            procs = []
    for p in procs:
        if p.wait():
            raise SystemExit("compile failed")
    triple = target["objects"][0]["flags"][1]
    exe = out / "profile_nodes"
    subprocess.run([*target["cc"], "-target", triple, "-O2", "-std=c11", *inc, str(HERE / "profile_nodes.c"),
                    *objs, "-o", str(exe), "-lm", "-lpthread"], check=True)
    return exe


def ort_profile(model: onnx.ModelProto, feeds: dict, runs: int, out: Path, stat, threads: int = 1) -> dict:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(out / "ort_profile")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    f = {k: v for k, v in feeds.items() if k in names}
    for _ in range(3):
        sess.run(None, f)
    for _ in range(runs):
        sess.run(None, f)
    prof = Path(sess.end_profiling())
    events = json.loads(prof.read_text())
    per = defaultdict(list)
    ops = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            n = e["name"][: -len("_kernel_time")]
            per[n].append(e["dur"])
            ops[n] = e["args"].get("op_name", "?")
    # insertion order is execution order; drop the warm-up runs
    return {n: (ops[n], stat(v[3:] or v)) for n, v in per.items()}


def ort_whole_run_us(model: onnx.ModelProto, feeds: dict, runs: int, threads: int = 1) -> float:
    """Best whole run of onnxruntime without profiling, which slows every node
    (the profiled nodes' sum is not its real time)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    f = {k: v for k, v in feeds.items() if k in names}
    for _ in range(3):
        sess.run(None, f)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, f)
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("prof-out"))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--best", action="store_true",
                    help="per node, best of the runs instead of the median (steadier on a busy machine)")
    ap.add_argument("--no-build", action="store_true", help="reuse the harness built last time")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of both engines")
    args = ap.parse_args()

    out = args.out.resolve()
    src = out / "models"
    src.mkdir(parents=True, exist_ok=True)
    model_path = src / args.model.name
    if not model_path.exists():
        model_path.write_bytes(args.model.read_bytes())
    opts = Options(models=src, out=out / "build", platforms=["linux"], abis=[toolchain.host_abi()])
    exe = out / "profile_nodes"
    if not args.no_build or not exe.exists():
        run_build(opts)
        exe = build_harness(out, opts.out)

    reg = registry_mod.load()
    model, _ = verify.randomize_constant_weights(onnx.load(str(model_path)), 0)
    data, feeds = verify._convert(model, model_path, reg, opts, 0)
    mrt = out / (model_path.stem + ".mrt")
    mrt.write_bytes(data)
    res = subprocess.run([str(exe), str(mrt), str(args.runs), str(args.threads)], check=True, capture_output=True,
                         text=True)
    rows, total = [], ""
    for line in res.stdout.splitlines():
        if line.startswith("#"):
            total = line
            continue
        idx, op, name, best, med, shape, detail = line.split("\t")
        rows.append({"op": op, "name": name, "best": float(best), "med": float(best if args.best else med),
                     "shape": shape, "detail": detail})
    ort_nodes = ort_profile(model, feeds, args.runs, out, min if args.best else statistics.median, args.threads)

    def family(op):
        return {"FusedConv": "Conv", "FusedConvAct": "Conv", "FusedGemm": "Gemm"}.get(op, op)

    mine, theirs = defaultdict(float), defaultdict(float)
    for r in rows:
        mine[family(r["op"])] += r["med"]
    for n, (op, us) in ort_nodes.items():
        theirs[family(op)] += us
    print(f"{model_path.stem}: {total}")
    print(f"{'op':24} {'minirt ms':>10} {'ort ms':>10} {'ratio':>7}")
    for op in sorted(set(mine) | set(theirs), key=lambda o: -mine.get(o, 0)):
        m, t = mine.get(op, 0) / 1e3, theirs.get(op, 0) / 1e3
        print(f"{op:24} {m:10.3f} {t:10.3f} {m / t if t else float('inf'):7.2f}")
    print(f"{'TOTAL':24} {sum(mine.values()) / 1e3:10.3f} {sum(theirs.values()) / 1e3:10.3f}")
    mine_whole = float(total.split("best_whole_run_us=")[1].split()[0]) if "best_whole_run_us=" in total else 0.0
    ort_whole = ort_whole_run_us(model, feeds, args.runs, args.threads)
    print(f"whole run, best of {args.runs}: minirt {mine_whole / 1e3:.3f} ms, onnxruntime {ort_whole / 1e3:.3f} ms "
          f"(without its profiler); minirt/onnxruntime {mine_whole / ort_whole:.2f}")
    # onnxruntime renames fused nodes (clip_4_nchwc, ...): pair the two
    # engines' nodes of one op family by execution order when the counts agree.
    paired = {}
    for fam in set(mine):
        a = [i for i, r in enumerate(rows) if family(r["op"]) == fam]
        b = [v for v in ort_nodes.values() if family(v[0]) == fam]
        if len(a) == len(b):
            paired.update(zip(a, b))
    print(f"\nslowest {args.top} minirt nodes (us, {'best' if args.best else 'median'}; ort paired by order within the op family):")
    order = sorted(range(len(rows)), key=lambda i: -rows[i]["med"])
    for i in order[: args.top]:
        r = rows[i]
        o = ort_nodes.get(r["name"]) or paired.get(i)
        ous = f"{o[1]:8.0f}" if o else "       -"
        print(f"{r['med']:8.0f} {ous}  {r['op']:10} {r['name'][:28]:28} {r['shape']:16} {r['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

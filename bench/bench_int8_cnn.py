"""int8 CNNs against float: library size per op set and latency, one thread.

    python bench/bench_int8_cnn.py [--runs 30] [--out bench-out/int8-cnn] [--json F]
                                   [--models resnet18,mobilenet_v2] [--no-android] [--size 224]
                                   [--threads 1,2]

Takes tests/test_int8_models.py's float models (a half-width ResNet-18 and a
MobileNetV2-like net, 1x3x64x64, 10 classes), or with --size 224 torchvision's
ResNet-18 and MobileNetV2 layouts at full width and 1000 classes, written in torch
here (random weights; BatchNorm statistics from one training-mode pass over random
images, so activations keep their scale through the depth instead of underflowing
once quantised), and quantises each with onnxruntime.quantization as the tests do:
QDQ per channel (what minibuild lowers to QLinearConv & co. at build time) and
QOperator. Then, per model:

- sizes: the float model and its QDQ per-channel form are each built alone, for
  linux x86_64 and android arm64-v8a, and the size report's library size and
  support units are printed (an int8 build must link `qgemm` and neither the float
  `gemm` nor `conv` unit);
- latency (host): minirt float, minirt int8 (QDQ lowered), onnxruntime float and
  onnxruntime int8 (the same QDQ model, which onnxruntime fuses at session start),
  at each of --threads (both engines' intra-op threads; default one), each engine
  in its own process (an idle multi-threaded onnxruntime session spins and would
  slow the others' threads), interleaved in blocks so load on a shared machine
  hits all alike; medians of --runs after a warm-up, and the int8 output's
  deviation from onnxruntime's in steps of the final DequantizeLinear's scale.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import test_int8_models as t8  # noqa: E402  (the models and the quantiser settings the tests use)
from minibuild import toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt  # noqa: E402

TARGETS = {"x86_64": ("linux", "x86_64"), "arm64": ("android", "arm64-v8a")}


def _calibrated_export(net, path: Path, size: int):
    """BatchNorm running statistics from one training-mode pass, then eval-mode export."""
    import torch
    nn = torch.nn
    torch.manual_seed(0)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # the running statistics become the pass's batch statistics
    net.train()
    with torch.no_grad():
        net(torch.randn(8, 3, size, size))
    net.eval()
    torch.onnx.export(net, torch.zeros(1, 3, size, size), str(path), input_names=["input"], output_names=["logits"],
                      opset_version=13, dynamo=False)


def resnet18_full(path: Path, size: int = 224):
    """torchvision's resnet18 layout: 7x7/2 stem, 3x3/2 MaxPool, stages of two basic
    blocks (64, 128, 256, 512), 1x1/2 projection shortcuts, GlobalAveragePool, FC 1000."""
    import torch
    torch.manual_seed(0)
    layers = t8.resnet18_layers([64, 128, 256, 512], 1000)
    _calibrated_export(torch.nn.Sequential(*layers), path, size)


def mobilenet_v2_full(path: Path, size: int = 224):
    """torchvision's mobilenet_v2 layout: 3x3/2 stem 32, inverted residual blocks
    (expand 1x1 + ReLU6, depthwise 3x3 + ReLU6, project 1x1), 1x1 to 1280, FC 1000."""
    import torch
    nn = torch.nn

    def cbr(cin, cout, k, s, groups=1):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()]

    class Inverted(nn.Module):
        def __init__(self, cin, cout, s, t):
            super().__init__()
            h = cin * t
            layers = (cbr(cin, h, 1, 1) if t != 1 else []) + cbr(h, h, 3, s, groups=h)
            layers += [nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.body = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    torch.manual_seed(0)
    layers = cbr(3, 32, 3, 2)
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            layers.append(Inverted(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += cbr(cin, 1280, 1, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    _calibrated_export(nn.Sequential(*layers), path, size)


FULL_MODELS = {"resnet18": resnet18_full, "mobilenet_v2": mobilenet_v2_full}


def build(model: Path, out: Path, platform: str, abi: str) -> dict:
    """Builds `model` alone for one target; returns its size report artifact."""
    mdir = out / "models"
    if out.exists():
        shutil.rmtree(out)
    mdir.mkdir(parents=True)
    shutil.copy(model, mdir / model.name)
    run_build(Options(models=mdir, out=out, platforms=[platform], abis=[abi]))
    report = json.loads((out / "size_report.json").read_text())
    art = next(a for a in report["artifacts"] if a["abi"] == abi and a["platform"] == platform)
    ops = sorted({f"{c['op']}:{c['dtype']}" for c in art["components"] if c["kind"] == "kernel" and c["op"]})
    support = {c["name"].split("/", 1)[-1]: c["bytes"] for c in art["components"] if c["kind"] == "support"}
    return {"file_size": art["file_size"], "totals": art["totals"], "support": support, "kernels": ops}


def worker(engine: str, path: str, build_dir: str, threads: int, save: str) -> int:
    """One engine in this process: runs once (output to `save`), then times blocks of the
    runs asked on stdin, one JSON list of ms per line."""
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    if engine == "minirt":
        minirt = import_minirt(Path(build_dir))
        so = minirt.SessionOptions()
        so.intra_op_num_threads = threads
        sess = minirt.InferenceSession(str(Path(build_dir) / "linux" / toolchain.host_abi() / "models" /
                                           f"{Path(path).stem}.mrt"), sess_options=so)
    else:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    iname = sess.get_inputs()[0].name if hasattr(sess, "get_inputs") else "input"
    np.save(save, sess.run(None, {iname: x})[0])
    print("[]", flush=True)
    for line in sys.stdin:
        if int(line) <= 0:
            break
        times = []
        for _ in range(int(line)):
            t = time.perf_counter()
            sess.run(None, {iname: x})
            times.append((time.perf_counter() - t) * 1e3)
        print(json.dumps(times), flush=True)
    return 0


def time_all(engines: dict, threads: int, runs: int, scratch: Path) -> tuple[dict, dict]:
    """engines: name -> (engine, model path, build dir). Each in its own process; 3 warm-up
    runs each, then 5 interleaved blocks; the median of every timed run per engine."""
    procs = {}
    for k, (engine, path, bdir) in engines.items():
        save = scratch / f"{k.replace(' ', '_')}_{threads}.npy"
        procs[k] = (subprocess.Popen([sys.executable, __file__, "--_worker", engine, str(path), str(bdir), str(threads),
                                      str(save)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True), save)
        if not procs[k][0].stdout.readline():
            raise SystemExit(f"{k}: the worker exited with {procs[k][0].wait()}")
    times = {k: [] for k in engines}
    block = max(1, runs // 5)
    for rnd in range(6):
        for k, (p, _) in procs.items():
            time.sleep(0.05)  # the previous engine's spinning workers park
            p.stdin.write(f"{3 if rnd == 0 else block}\n")
            p.stdin.flush()
            got = json.loads(p.stdout.readline())
            if rnd:
                times[k] += got
    outs = {}
    for k, (p, save) in procs.items():
        p.stdin.write("0\n")
        p.stdin.close()
        p.wait()
        outs[k] = np.load(save)
    return {k: statistics.median(v) for k, v in times.items()}, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("bench-out/int8-cnn"))
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--no-android", action="store_true", help="sizes for x86_64 only")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--size", type=int, default=64,
                    help="64: the tests' small models; 224 (or any other): torchvision's layouts at that size")
    ap.add_argument("--threads", default="1", help="comma list of intra-op thread counts for both engines")
    ap.add_argument("--_worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        engine, path, bdir, threads, save = args._worker
        return worker(engine, path, bdir, int(threads), save)

    out = args.out.resolve()
    src = out / "src"
    src.mkdir(parents=True, exist_ok=True)
    results = []
    for name in [n for n in args.models.split(",") if n]:
        fp = src / (f"{name}.onnx" if args.size == 64 else f"{name}_{args.size}.onnx")
        if not fp.exists():
            print(f"exporting {name} ...", flush=True)
            if args.size == 64:
                t8.FLOAT_MODELS[name](fp)
            else:
                FULL_MODELS[name](fp, args.size)
        forms = {"float": fp}
        for form in ("qdq_channel", "qoperator"):
            forms[form] = src / f"{fp.stem}_{form}.onnx"
            if not forms[form].exists():
                t8._quantise(fp, forms[form], form)

        sizes = {}
        for tname, (platform, abi) in TARGETS.items():
            if args.no_android and platform == "android":
                continue
            for form in ("float", "qdq_channel"):
                sizes[f"{form}/{tname}"] = build(forms[form], out / "build" / name / form / tname, platform, abi)

        # Latency on the host builds, per thread count.
        shape = [d.dim_value for d in onnx.load(str(fp)).graph.input[0].type.tensor_type.shape.dim]
        engines = {f"minirt {form}": ("minirt", forms[form], out / "build" / name / form / "x86_64")
                   for form in ("float", "qdq_channel")}
        engines.update({f"ort {form}": ("ort", forms[form], "-") for form in ("float", "qdq_channel", "qoperator")})
        ms_by_threads, dev = {}, None
        step = t8._last_dq_scale(onnx.load(str(forms["qdq_channel"])))
        for threads in (int(t) for t in args.threads.split(",")):
            ms_by_threads[threads], outs = time_all(engines, threads, args.runs, src)
            dev = float(np.max(np.abs(outs["minirt qdq_channel"] - outs["ort qdq_channel"]))) / step
        ms = ms_by_threads[min(ms_by_threads)]
        results.append({"model": name, "input": shape, "sizes": sizes, "latency_ms": ms,
                        "latency_ms_by_threads": {str(t): v for t, v in ms_by_threads.items()},
                        "int8_max_dev_steps": dev, "cpu_count": os.cpu_count()})

        print(f"\n== {name} {shape}")
        print(f"{'build':22} {'.so bytes':>10} {'kernels':>8}  support units (bytes)")
        for k, v in sizes.items():
            sup = ", ".join(f"{u} {b}" for u, b in sorted(v["support"].items()))
            print(f"{k:22} {v['file_size']:10d} {v['totals']['kernels']:8d}  {sup}")
        for k, v in sizes.items():
            if k.startswith("qdq") and ("gemm" in v["support"] or "conv" in v["support"]):
                print(f"WARNING: {k} links a float support unit: {sorted(v['support'])}")
        for threads, ms in ms_by_threads.items():
            label = f"engine ({threads} thread{'s' if threads > 1 else ''})"
            print(f"{label:22} {'ms':>8}")
            for k, v in ms.items():
                print(f"{k:22} {v:8.2f}")
            print(f"{threads} thread(s): int8/float minirt {ms['minirt qdq_channel'] / ms['minirt float']:.2f}x, "
                  f"minirt int8 / ort int8 (QDQ) {ms['minirt qdq_channel'] / ms['ort qdq_channel']:.2f}x, "
                  f"(QOperator) {ms['minirt qdq_channel'] / ms['ort qoperator']:.2f}x", flush=True)
        print(f"int8 max deviation from ort: {dev:.2f} steps", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

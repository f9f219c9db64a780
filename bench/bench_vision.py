"""EfficientNet-B0 and MobileNetV3-small: minirt against onnxruntime, one thread each.

    python bench/bench_vision.py [--runs 30] [--out bench-vision] [--models efficientnet_b0,mobilenet_v3_small]
    python bench/bench_vision.py --micro --out bench-micro && \
        python bench/profile_nodes.py bench-micro/models/micro.onnx --best   # per kernel: Sigmoid, Tanh, Erf, ...

Exports torchvision's architectures with random weights at 1x3x224x224 (BatchNorm
statistics taken from one training-mode pass, so activations stay in the normal
float range and no engine is timed on denormals), builds a runtime for them
(linux, host ABI), then times both engines in this process on the same input,
runs interleaved (minirt, onnxruntime, minirt, ...) so load on a shared machine
hits both alike, and prints the medians and the ratio minirt/onnxruntime (< 1:
minirt is faster). Peak RSS is measured apart: one fresh Python process per
(engine, model) loads the model, runs it once and reports its peak resident set
(VmHWM; `ru_maxrss` would not do: Linux carries the forking parent's peak into
it across exec, so every child would report this process's size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from minibuild import registry as registry_mod, toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import _convert, import_minirt  # noqa: E402

SHAPE = (1, 3, 224, 224)
MODELS = ("efficientnet_b0", "mobilenet_v3_small")
# One-node models for the elementwise kernels: EfficientNet-B0's largest SiLU
# tensor, and a BERT-base-like attention score tensor for Softmax.
MICRO_SHAPE = (1, 96, 112, 112)
MICRO = {"Sigmoid": {}, "Tanh": {}, "Exp": {}, "Erf": {}, "Gelu": {}, "HardSigmoid": {}, "HardSwish": {},
         "Mish": {}, "Softmax": {"axis": -1}}


def micro_model() -> onnx.ModelProto:
    """One model, one branch per op of MICRO off two inputs (x for the elementwise
    ops, s for Softmax): `bench/profile_nodes.py` on it gives each kernel's time
    apart from the binding's input and output copies."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node(op, ["s" if op == "Softmax" else "x"], [op.lower()], **attrs)
             for op, attrs in MICRO.items()]
    g = helper.make_graph(nodes, "micro", [helper.make_tensor_value_info("x", TensorProto.FLOAT, MICRO_SHAPE),
                                           helper.make_tensor_value_info("s", TensorProto.FLOAT, (12, 128, 128))],
                          [helper.make_tensor_value_info(op.lower(), TensorProto.FLOAT,
                                                        (12, 128, 128) if op == "Softmax" else MICRO_SHAPE)
                           for op in MICRO])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def export(name: str, path: Path, seed: int = 0) -> None:
    """torchvision's `name` with seeded random weights, as torch.onnx.export writes it."""
    import torch
    import exporters
    tv = exporters.import_torchvision()
    torch.manual_seed(seed)
    m = getattr(tv.models, name)(weights=None)
    # BatchNorm statistics from one training-mode pass (momentum 1: this batch's stats).
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.momentum = 1.0
    m.train()
    with torch.no_grad():
        m(torch.randn(4, *SHAPE[1:]))
    m.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(*SHAPE),), str(path), dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["logits"])


_RSS_MINIRT = """
import sys, numpy as np
def hwm():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])
sys.path.insert(0, sys.argv[2])
import minirt
s = minirt.InferenceSession(open(sys.argv[1], 'rb').read())
s.run(None, {s.get_inputs()[0].name: np.random.default_rng(0).standard_normal(%r).astype(np.float32)})
print(hwm())
"""
_RSS_ORT = """
import sys, numpy as np
def hwm():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])
import onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])
s.run(None, {s.get_inputs()[0].name: np.random.default_rng(0).standard_normal(%r).astype(np.float32)})
print(hwm())
"""


def peak_rss_mb(script: str, *argv: str) -> float:
    res = subprocess.run([sys.executable, "-c", script % (SHAPE,), *argv], check=True, capture_output=True,
                         text=True)
    return int(res.stdout.split()[-1]) / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("bench-vision"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--no-build", action="store_true", help="reuse the runtime built last time")
    ap.add_argument("--no-rss", action="store_true")
    ap.add_argument("--micro", action="store_true", help="one-node models of the elementwise kernels instead")
    ap.add_argument("--json", type=Path, help="write results here")
    args = ap.parse_args()
    if args.micro:
        args.no_rss = True

    import onnxruntime as ort
    out = args.out.resolve()
    src = out / "models"
    src.mkdir(parents=True, exist_ok=True)
    names = ["micro"] if args.micro else [n for n in args.models.split(",") if n]
    for n in names:
        if args.micro:
            onnx.save(micro_model(), str(src / "micro.onnx"))
        elif not (src / f"{n}.onnx").exists():
            print(f"exporting {n} ...", flush=True)
            export(n, src / f"{n}.onnx")
    opts = Options(models=src, out=out / "build", platforms=["linux"], abis=[toolchain.host_abi()])
    if not args.no_build:
        run_build(opts)
    minirt = import_minirt(opts.out)
    pkg = str(opts.out / "linux" / toolchain.host_abi() / "python")
    reg = registry_mod.load()
    rows = []
    print(f"{'model':22} {'minirt ms':>10} {'ort ms':>10} {'ratio':>7} {'max abs err':>12} "
          f"{'minirt MB':>10} {'ort MB':>8}")
    for n in names:
        path = src / f"{n}.onnx"
        model = onnx.load(str(path))
        data, feeds = _convert(model, path, reg, opts, 0)
        mrt = out / f"{n}.mrt"
        mrt.write_bytes(data)
        sess = minirt.InferenceSession(data)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        err = max(float(np.max(np.abs(g - w))) for g, w in zip(sess.run(None, feeds), ref.run(None, feeds)))
        tm, to = [], []
        for _ in range(3):
            sess.run(None, feeds), ref.run(None, feeds)
        for _ in range(args.runs):
            t = time.perf_counter()
            sess.run(None, feeds)
            tm.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            ref.run(None, feeds)
            to.append((time.perf_counter() - t) * 1e3)
        sess.close()
        del ref
        m_ms, o_ms = statistics.median(tm), statistics.median(to)
        rss_m = rss_o = float("nan")
        if not args.no_rss:
            rss_m = peak_rss_mb(_RSS_MINIRT, str(mrt), pkg)
            rss_o = peak_rss_mb(_RSS_ORT, str(path))
        rows.append({"model": n, "minirt_ms": m_ms, "onnxruntime_ms": o_ms, "ratio": m_ms / o_ms,
                     "max_abs_err": err, "minirt_peak_rss_mb": rss_m, "onnxruntime_peak_rss_mb": rss_o})
        print(f"{n:22} {m_ms:10.2f} {o_ms:10.2f} {m_ms / o_ms:6.2f}x {err:12.2e} {rss_m:10.1f} {rss_o:8.1f}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": args.runs, "results": rows},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peers: minirt against onnxruntime, ExecuTorch (XNNPACK) and LiteRT (XNNPACK),
at 1 and 2 threads, with each engine's peak resident memory.

    bash bench/setup-peers.sh                  # once: .venv-bench with the peers
    .venv-bench/bin/python bench/bench_peers.py [--models mobilenet_v2,resnet50,...]
        [--threads 1,2] [--rounds 5] [--runs 10] [--out bench-out/peers.md] [--work bench-out/peers]

Models (224x224 images; random weights): MobileNetV2, ResNet-50, EfficientNet-B0,
a BERT-small encoder (transformers BertModel: 4 layers, hidden 256, 4 heads,
sequence 128) and an int8 ResNet-18. Each engine gets its own form of the same
architecture:

- minirt, onnxruntime: the torchvision / transformers module exported by
  torch.onnx.export (TorchScript exporter, opset 17); int8 ResNet-18 is
  onnxruntime.quantization.quantize_static, QDQ, per channel (uint8 activations,
  int8 weights: onnxruntime's default and the tests' form). minirt is built for
  all of them at once (`minibuild --platform linux --abi x86_64`) on every run.
- ExecuTorch: the same torch module (same weights) through torch.export and the
  XNNPACK partitioner to a .pte; int8 through the XNNPACK quantizer (pt2e).
- LiteRT: tf.keras.applications MobileNetV2 / ResNet50 / EfficientNetB0
  (weights=None), a Keras BERT encoder of the same shape and a Keras ResNet-18
  (full-integer quantised with a representative data set for int8), converted by
  the TF Lite converter. These have their own random weights: timing only.

Random weights need BatchNorm statistics from data (with the fresh ones, outputs
underflow and the timings measure denormals): every BatchNorm's running
statistics are set from one training-mode pass on random input before export.

Each engine runs in its own process (an idle onnxruntime pool spins and slows
other engines' threads; ExecuTorch's bindings carry libtorch), which imports only
what the engine needs, loads the model, runs it once and reports its peak RSS
(VmHWM), then times blocks of --runs runs when told. The engines are interleaved
round-robin, --rounds blocks each; an engine's time is the median of its
per-block medians. Outputs of minirt and ExecuTorch are compared with
onnxruntime's on the same input. Exports and conversions are cached in --work.

Writes a Markdown table per thread count (stdout and --out) and JSON beside it;
beside minirt / onnxruntime it gives that ratio's lowest and highest over the
rounds, how far one run's ratio can be trusted on a shared machine.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import functools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

IMAGE = (1, 3, 224, 224)
SEQ, VOCAB, HIDDEN, LAYERS, HEADS = 128, 1000, 256, 4, 4
ENGINES = ("minirt", "onnxruntime", "executorch", "litert")
# model -> (torchvision builder or "bert", keras form, int8?)
MODELS = {
    "mobilenet_v2": ("mobilenet_v2", "MobileNetV2", False),
    "resnet50": ("resnet50", "ResNet50", False),
    "efficientnet_b0": ("efficientnet_b0", "EfficientNetB0", False),
    "bert_small": ("bert", "bert", False),
    "resnet18_int8": ("resnet18", "resnet18", True),
}
SEED = 0


# --- inputs --------------------------------------------------------------------------

def onnx_feeds(model: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    if MODELS[model][0] == "bert":
        ids = rng.integers(0, VOCAB, size=(1, SEQ)).astype(np.int64)
        mask = np.ones((1, SEQ), np.int64)
        mask[0, SEQ - SEQ // 4:] = 0  # the last quarter is padding
        return {"input_ids": ids, "attention_mask": mask}
    return {"image": rng.standard_normal(IMAGE).astype(np.float32)}


# --- preparation (each in its own process: torch and TensorFlow stay apart) -----------

def _torchvision():
    """torchvision beside the CPU torch (tests/exporters.py explains why)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from exporters import import_torchvision
    return import_torchvision()


def _calibrate_bn(module, example_args):
    """Running statistics of every BatchNorm from one training-mode pass."""
    import torch
    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: one pass gives that batch's statistics
    module.train()
    with torch.no_grad():
        module(*example_args)
    module.eval()


def torch_module(model: str):
    """The torch module and its example inputs (the feeds, as tensors)."""
    import torch
    tv_name = MODELS[model][0]
    feeds = onnx_feeds(model)
    torch.manual_seed(SEED)
    if tv_name == "bert":
        tv = _torchvision()  # transformers imports torchvision where it is installed
        del tv
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         intermediate_size=4 * HIDDEN, max_position_embeddings=SEQ, attn_implementation="eager")
        bert = BertModel(cfg).eval()

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask):
                return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        return Encoder().eval(), tuple(torch.from_numpy(v) for v in feeds.values())
    tv = _torchvision()
    m = getattr(tv.models, tv_name)(weights=None)
    g = torch.Generator().manual_seed(SEED + 1)
    _calibrate_bn(m, (torch.randn((8,) + IMAGE[1:], generator=g),))
    return m, (torch.from_numpy(feeds["image"]),)


def _calibration_images(n: int, shape) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED + 2)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def prepare_onnx(model: str, dest: Path) -> None:
    import torch
    module, args = torch_module(model)
    names = list(onnx_feeds(model))
    float_path = dest.with_suffix(".float.onnx") if MODELS[model][2] else dest
    with torch.no_grad():
        torch.onnx.export(module, args, str(float_path), dynamo=False, opset_version=17,
                          input_names=names, output_names=["output"])
    if MODELS[model][2]:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"image": x} for x in _calibration_images(8, IMAGE)])

            def get_next(self):
                return next(self.it, None)

        quantize_static(str(float_path), str(dest), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # onnxruntime's default
        float_path.unlink()


def prepare_pte(model: str, dest: Path) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    module, args = torch_module(model)
    with torch.no_grad():
        if MODELS[model][2]:
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer, get_symmetric_quantization_config)
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
            quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
            graph = torch.export.export(module, args).module()
            graph = prepare_pt2e(graph, quantizer)
            for x in _calibration_images(8, IMAGE):
                graph(torch.from_numpy(x))
            module = convert_pt2e(graph)
        ep = torch.export.export(module, args)
        prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    dest.write_bytes(prog.buffer)


def _keras_resnet18(keras):
    """ResNet-18 (basic blocks 2-2-2-2, 64..512 channels) as Keras layers, NHWC."""
    L = keras.layers

    def conv_bn(x, ch, k, s, relu=True):
        x = L.Conv2D(ch, k, strides=s, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        return L.ReLU()(x) if relu else x

    inp = keras.Input((224, 224, 3), batch_size=1)
    x = conv_bn(inp, 64, 7, 2)
    x = L.MaxPooling2D(3, 2, padding="same")(x)
    for stage, ch in enumerate((64, 128, 256, 512)):
        for block in range(2):
            s = 2 if stage and not block else 1
            y = conv_bn(x, ch, 3, s)
            y = conv_bn(y, ch, 3, 1, relu=False)
            if s != 1 or x.shape[-1] != ch:
                x = conv_bn(x, ch, 1, s, relu=False)
            x = L.ReLU()(L.Add()([x, y]))
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(1000)(x))


def _keras_bert(keras):
    """A BERT encoder of BertModel's shape (post-norm, GELU, padded mask) in Keras."""
    L = keras.layers
    ids = keras.Input((SEQ,), batch_size=1, dtype="int32", name="input_ids")
    mask = keras.Input((SEQ,), batch_size=1, dtype="int32", name="attention_mask")
    pos = keras.ops.arange(SEQ)[None]
    x = L.Embedding(VOCAB, HIDDEN)(ids) + L.Embedding(SEQ, HIDDEN)(pos)
    x = L.LayerNormalization(epsilon=1e-12)(x)
    attn_mask = keras.ops.cast(mask[:, None, :], "bool")
    for _ in range(LAYERS):
        a = L.MultiHeadAttention(HEADS, HIDDEN // HEADS)(x, x, attention_mask=attn_mask)
        x = L.LayerNormalization(epsilon=1e-12)(x + a)
        f = L.Dense(HIDDEN)(L.Dense(4 * HIDDEN, activation="gelu")(x))
        x = L.LayerNormalization(epsilon=1e-12)(x + f)
    return keras.Model([ids, mask], x)


def prepare_tflite(model: str, dest: Path) -> None:
    import tensorflow as tf
    keras = tf.keras
    keras.utils.set_random_seed(SEED)
    form = MODELS[model][1]
    if form == "bert":
        km = _keras_bert(keras)
    elif form == "resnet18":
        km = _keras_resnet18(keras)
    else:
        km = getattr(keras.applications, form)(weights=None, input_shape=(224, 224, 3))
    bns = [layer for layer in km._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    if bns:  # one training-mode pass sets the moving statistics to that batch's
        for layer in bns:
            layer.momentum = 0.0
        km(np.random.default_rng(SEED + 1).standard_normal((8, 224, 224, 3)).astype(np.float32), training=True)
    conv = tf.lite.TFLiteConverter.from_keras_model(km)
    if MODELS[model][2]:
        nhwc = (1, 224, 224, 3)

        def representative():
            for x in _calibration_images(8, nhwc):
                yield [x]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    dest.write_bytes(conv.convert())


PREPARE = {"onnx": prepare_onnx, "pte": prepare_pte, "tflite": prepare_tflite}
ENGINE_FORM = {"minirt": "mrt", "onnxruntime": "onnx", "executorch": "pte", "litert": "tflite"}


# --- the engine worker ---------------------------------------------------------------

def _status_mb(field: str) -> float:
    """VmHWM (peak resident) or VmRSS (resident now) of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_engine(engine: str, path: Path, threads: int, model: str, minirt_python: Path | None):
    """A zero-argument callable running one inference; it returns the first output."""
    if engine == "none":  # the interpreter and numpy alone: the floor under every engine's RSS
        return lambda: np.zeros(1, np.float32)
    if engine == "minirt":
        sys.path.insert(0, str(minirt_python))
        import minirt
        so = minirt.SessionOptions()
        so.intra_op_num_threads = threads
        sess = minirt.InferenceSession(str(path), sess_options=so)
        feeds = onnx_feeds(model)
        return lambda: sess.run(None, feeds)[0]
    if engine == "onnxruntime":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        feeds = onnx_feeds(model)
        return lambda: sess.run(None, feeds)[0]
    if engine == "executorch":
        import torch
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime
        portable_lib._unsafe_reset_threadpool(threads)
        method = Runtime.get().load_program(path).load_method("forward")
        inputs = [torch.from_numpy(v) for v in onnx_feeds(model).values()]
        return lambda: method.execute(inputs)[0].numpy()
    if engine == "litert":
        from ai_edge_litert.interpreter import Interpreter
        it = Interpreter(model_path=str(path), num_threads=threads)
        it.allocate_tensors()
        rng = np.random.default_rng(SEED)
        for d in it.get_input_details():
            if "mask" in d["name"]:  # as onnx_feeds: the last quarter is padding
                x = np.ones(d["shape"], d["dtype"])
                x[..., SEQ - SEQ // 4:] = 0
            elif np.issubdtype(d["dtype"], np.integer):
                x = rng.integers(0, VOCAB, size=d["shape"]).astype(d["dtype"])
            else:
                x = rng.standard_normal(d["shape"]).astype(d["dtype"])
            it.set_tensor(d["index"], x)
        out = it.get_output_details()[0]["index"]

        def run():
            it.invoke()
            return it.get_tensor(out)
        return run
    raise ValueError(engine)


def worker(args) -> int:
    """Loads one engine, runs once, says its peak RSS, then times blocks on request."""
    t0 = time.perf_counter()
    fn = load_engine(args.engine, Path(args.path), args.threads_n, args.model,
                     Path(args.minirt_python) if args.minirt_python else None)
    out = np.asarray(fn())
    first_ms = (time.perf_counter() - t0) * 1e3
    np.save(args.save, out)
    reply = {"vmhwm_mb": _status_mb("VmHWM"), "vmrss_mb": _status_mb("VmRSS"), "load_and_first_run_ms": first_ms, "shape": list(out.shape),
             "finite": bool(np.all(np.isfinite(out)))}
    print(json.dumps(reply), flush=True)
    for line in sys.stdin:
        n = int(line)
        if n <= 0:
            break
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        print(json.dumps(times), flush=True)
    return 0


class Engine:
    def __init__(self, name: str, model: str, path: Path, threads: int, save: Path, minirt_python: Path):
        self.name = name
        cmd = [sys.executable, __file__, "--_worker", name, "--_path", str(path), "--_threads", str(threads),
               "--_model", model, "--_save", str(save), "--_minirt-python", str(minirt_python)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
        self.log = save.with_suffix(".log")
        with open(self.log, "w") as log:  # the engines' own chatter (TF, cpuinfo) goes here
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                         env=env)
        line = self.proc.stdout.readline()
        if not line:
            tail = (self.log.read_text().strip().splitlines() or ["no message"])[-1][:200]
            raise RuntimeError(f"the worker exited with {self.proc.wait()} before its first run: {tail} "
                               f"(all of it in {self.log})")
        self.hello = json.loads(line)

    def block(self, runs: int) -> list[float]:
        try:
            self.proc.stdin.write(f"{runs}\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            tail = (self.log.read_text().strip().splitlines() or ["no message"])[-1][:200]
            raise RuntimeError(f"the worker exited with {self.proc.wait()} while timing: {tail} (all of it in {self.log})")
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.write("0\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


# --- driver --------------------------------------------------------------------------

def prepare_all(models: list[str], work: Path, engines: list[str], fresh: bool) -> dict[tuple[str, str], Path | str]:
    """Each model in each form the engines need, cached; a form that fails is reported, not fatal."""
    forms = sorted({ENGINE_FORM[e] for e in engines if ENGINE_FORM[e] != "mrt"} | {"onnx"})
    paths: dict[tuple[str, str], Path | str] = {}
    for model in models:
        for form in forms:
            dest = work / "models" / model / f"{model}.{form}"
            failed = dest.with_suffix(f".{form}.failed")
            if fresh:
                dest.unlink(missing_ok=True)
                failed.unlink(missing_ok=True)
            if dest.is_file():
                paths[(model, form)] = dest
                continue
            if failed.is_file():
                paths[(model, form)] = failed.read_text().strip().splitlines()[-1][:200]
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            tmp = dest.with_name(f".{dest.name}.tmp")
            r = subprocess.run([sys.executable, __file__, "--_prepare", form, "--_model", model, "--_path", str(tmp)],
                               capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
            if r.returncode == 0 and tmp.is_file():
                tmp.rename(dest)
                paths[(model, form)] = dest
                print(f"prepared {dest.name} in {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
            else:
                failed.write_text(r.stderr[-4000:] or f"exit {r.returncode}")
                paths[(model, form)] = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
                print(f"could not prepare {dest.name}: {paths[(model, form)]}", file=sys.stderr, flush=True)
    return paths


def build_minirt(models: list[str], paths: dict, work: Path, rev: str | None) -> tuple[Path, Path]:
    """One minirt for every ONNX model, rebuilt each run (the kernels may have changed):
    from this checkout's working tree, or with `rev` from that commit's files
    (`git archive`), so edits in progress in the tree do not enter the numbers.
    In a directory of this run's own (minibuild's action cache keeps the rebuild
    cheap): two runs sharing --work on one machine would otherwise time each other's
    library, or fail on a build made for other models."""
    run = work / f"minirt-run-{os.getpid()}"
    src = run / "models-in"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for model in models:
        p = paths.get((model, "onnx"))
        if isinstance(p, Path):
            shutil.copyfile(p, src / f"{model}.onnx")
    out = run / "build"
    env = dict(os.environ)
    if rev:
        tree = run / "src"
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        env["PYTHONPATH"] = str(tree.resolve())
    cmd = [sys.executable, "-m", "minibuild", "--models", str(src.resolve()), "--platform", "linux",
           "--abi", "x86_64", "--out", str(out.resolve())]
    r = subprocess.run(cmd, env=env, cwd=str(work), capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"minibuild failed for {src} (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return out / "models", out / "linux" / "x86_64" / "python"


def compare(got: np.ndarray, ref: np.ndarray) -> dict:
    if got.shape != ref.shape:
        return {"max_abs": float("inf"), "rel_to_range": float("inf"), "note": f"shape {got.shape} vs {ref.shape}"}
    d = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    span = float(ref.max() - ref.min()) or 1.0
    return {"max_abs": d, "rel_to_range": d / span}


def run_model(model: str, threads: int, files: dict, args, scratch: Path) -> dict:
    engines = {}
    notes = {}
    for name in args.engines:
        f = files.get(name)
        if not isinstance(f, Path):
            notes[name] = f or "not prepared"
            continue
        try:
            engines[name] = Engine(name, model, f, threads, scratch / f"{model}-{name}-{threads}.npy", args.minirt_python)
        except Exception as e:  # noqa: BLE001  (one engine's failure must not stop the others)
            notes[name] = str(e)[:200]
    per_block: dict[str, list[float]] = {k: [] for k in engines}
    for rnd in range(args.rounds + 1):  # round 0 warms up
        for name, e in list(engines.items()):
            time.sleep(0.05)  # let the previous engine's spinning workers park
            try:
                times = e.block(args.runs if rnd else 2)
            except RuntimeError as err:
                notes[name] = str(err)
                del engines[name], per_block[name]
                continue
            if rnd:
                per_block[name].append(statistics.median(times))
    res = {"model": model, "threads": threads, "loadavg_1min": os.getloadavg()[0], "engines": {}}
    ref = None
    if "onnxruntime" in engines:
        ref = np.load(scratch / f"{model}-onnxruntime-{threads}.npy")
    for name, e in engines.items():
        e.close()
        row = {"ms": statistics.median(per_block[name]), "block_medians_ms": per_block[name],
               "best_block_ms": min(per_block[name]),
               "peak_rss_mb": e.hello["vmhwm_mb"], "rss_after_first_run_mb": e.hello["vmrss_mb"],
               "output_finite": e.hello["finite"]}
        if ref is not None and name in ("minirt", "executorch"):
            row["vs_onnxruntime"] = compare(np.load(scratch / f"{model}-{name}-{threads}.npy"), ref)
        if name == "litert":
            row["note"] = "own weights (Keras): timing only"
        res["engines"][name] = row
    res["not_run"] = notes
    exact = exact_int8_reference(model, files.get("onnxruntime"))
    if exact is not None:
        # onnxruntime's own int8 output is not the exact one on this CPU: both engines
        # against the exact result (onnxruntime on the model's uint8-weight copy)
        for name in ("minirt", "onnxruntime"):
            if name in res["engines"]:
                got = np.load(scratch / f"{model}-{name}-{threads}.npy")
                res["engines"][name]["vs_exact"] = compare(got, exact)
    return res


@functools.lru_cache(maxsize=None)  # one inference a model, not one a thread count
def exact_int8_reference(model: str, onnx_path) -> np.ndarray | None:
    """For an int8 model on a CPU where onnxruntime's uint8 x int8 GEMM saturates
    (AVX2 without VNNI: minibuild/ortref.py), the exact output; else None."""
    if not MODELS[model][2] or not isinstance(onnx_path, Path):
        return None
    from minibuild import ortref
    if not ortref.u8s8_saturates():
        return None
    return np.asarray(ortref.reference_session(onnx_path).run(None, onnx_feeds(model))[0])


def fmt_ms(x):
    return f"{x:.2f}" if x is not None else "–"


def round_range(mine: dict | None, ort: dict | None) -> str:
    """The lowest and highest of minirt / onnxruntime over the rounds, each round's
    two block medians taken minutes apart at most (the engines run interleaved): how
    far one run's ratio can be trusted on this machine."""
    if not mine or not ort or len(mine["block_medians_ms"]) != len(ort["block_medians_ms"]):
        return "–"
    per = [a / b for a, b in zip(mine["block_medians_ms"], ort["block_medians_ms"])]
    return f"{min(per):.2f}-{max(per):.2f}"


def table(results: list[dict], threads: int, engines: list[str]) -> str:
    rows = [r for r in results if r["threads"] == threads]
    paired = "minirt" in engines and "onnxruntime" in engines
    head = (["model"] + [f"{e} ms" for e in engines] + [f"{e}/ort" for e in engines if e != "onnxruntime"]
            + (["minirt/ort by round"] if paired else [])
            + [f"{e}/fastest" for e in engines] + [f"{e} MB" for e in engines] + ["load"])
    lines = [f"### {threads} thread{'s' if threads > 1 else ''}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = []
    for r in rows:
        ms = {e: r["engines"][e]["ms"] if e in r["engines"] else None for e in engines}
        got = [v for v in ms.values() if v]
        fastest = min(got) if got else None
        ort = ms.get("onnxruntime")
        cells = [r["model"]] + [fmt_ms(ms[e]) for e in engines]
        cells += [f"{ms[e] / ort:.2f}" if ms[e] and ort else "–" for e in engines if e != "onnxruntime"]
        if paired:
            cells.append(round_range(r["engines"].get("minirt"), r["engines"].get("onnxruntime")))
        cells += [f"{ms[e] / fastest:.2f}" if ms[e] else "–" for e in engines]
        cells += [f"{r['engines'][e]['peak_rss_mb']:.0f}" if e in r["engines"] else "–" for e in engines]
        cells.append(f"{r['loadavg_1min']:.1f}")
        if ms.get("minirt") and ort:
            ratios.append(ms["minirt"] / ort)
        lines.append("| " + " | ".join(cells) + " |")
    if ratios:
        lines += ["", f"Geometric mean of minirt / onnxruntime over {len(ratios)} models: "
                  f"**{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}** (< 1: minirt is faster)."]
    checks = [f"{r['model']} {e} {c['max_abs']:.1e} ({c['rel_to_range']:.1e} of the output's range)"
              for r in rows for e in engines if (c := r["engines"].get(e, {}).get("vs_onnxruntime"))]
    if checks:
        lines += ["", "Max abs difference from onnxruntime's output on the same input: " + "; ".join(checks) + ". "
                  "(ExecuTorch's int8 model is quantised by its own quantizer from the same float weights, so "
                  "its difference includes a different quantisation.)"]
    exact = [f"{r['model']}: onnxruntime {r['engines']['onnxruntime']['vs_exact']['max_abs']:.1e}, minirt "
             f"{r['engines']['minirt']['vs_exact']['max_abs']:.1e}" for r in rows
             if "vs_exact" in r["engines"].get("onnxruntime", {}) and "vs_exact" in r["engines"].get("minirt", {})]
    if exact:
        lines += ["", "On this CPU onnxruntime's uint8 x int8 GEMM saturates (AVX2 without VNNI: 16-bit pair sums "
                  "of vpmaddubsw), so its int8 output is not the exact one and its int8 time is that of the "
                  "overflowing arithmetic. Max abs difference from the exact output (onnxruntime on the model's "
                  "uint8-weight copy, minibuild/ortref.py): " + "; ".join(exact) + "."]
    missing = {(r["model"], e): why for r in rows for e, why in r["not_run"].items()}
    if missing:
        lines += [""] + [f"- {m}, {e}: not run ({why})" for (m, e), why in sorted(missing.items())]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per engine, interleaved round-robin")
    ap.add_argument("--runs", type=int, default=10, help="runs per block")
    ap.add_argument("--out", type=Path, default=Path("bench-out/peers.md"), help="Markdown; JSON beside it")
    ap.add_argument("--work", type=Path, default=Path("bench-out/peers"), help="exports, conversions, the minirt build")
    ap.add_argument("--fresh", action="store_true", help="export and convert again instead of using the cache")
    ap.add_argument("--minirt-rev", help="build minirt from this commit (e.g. HEAD) instead of the working tree")
    ap.add_argument("--_worker"), ap.add_argument("--_prepare"), ap.add_argument("--_path")
    ap.add_argument("--_threads", dest="threads_n", type=int), ap.add_argument("--_model")
    ap.add_argument("--_save"), ap.add_argument("--_minirt-python", dest="minirt_python")
    args = ap.parse_args()
    if args._worker:
        args.engine, args.path, args.model, args.save = args._worker, args._path, args._model, args._save
        return worker(args)
    if args._prepare:
        PREPARE[args._prepare](args._model, Path(args._path))
        return 0

    if args.rounds < 1 or args.runs < 1:
        ap.error("--rounds and --runs must be at least 1")
    models = args.models.split(",")
    args.engines = args.engines.split(",")
    bad = [m for m in models if m not in MODELS] + [e for e in args.engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown {', '.join(bad)}; models: {', '.join(MODELS)}; engines: {', '.join(ENGINES)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = os.getloadavg()[0]
    paths = prepare_all(models, args.work, args.engines, args.fresh)
    mrt_dir = None
    if "minirt" in args.engines:
        mrt_dir, args.minirt_python = build_minirt(models, paths, args.work, args.minirt_rev)
        atexit.register(shutil.rmtree, args.work / f"minirt-run-{os.getpid()}", ignore_errors=True)
    scratch = args.work / "outputs"
    scratch.mkdir(parents=True, exist_ok=True)
    floor = Engine("none", models[0], Path(os.devnull), 1, scratch / "none.npy", args.minirt_python)
    floor.close()
    floor_mb = floor.hello["vmhwm_mb"]
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        for model in models:
            files = {e: paths.get((model, ENGINE_FORM[e])) for e in args.engines if e != "minirt"}
            if "minirt" in args.engines:
                mrt = mrt_dir / f"{model}.mrt"
                files["minirt"] = mrt if mrt.is_file() else "minibuild did not build it"
            r = run_model(model, threads, files, args, scratch)
            results.append(r)
            print(f"{model:16} {threads}T " + "  ".join(f"{e} {v['ms']:7.2f} ms" for e, v in r["engines"].items()),
                  file=sys.stderr, flush=True)
    load = os.getloadavg()
    header = [f"# minirt and its peers, {started:%Y-%m-%d %H:%M} UTC", "",
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; 1-minute load average "
              f"{load_start:.1f} at the start, {load[0]:.1f} at the end, and per row in the `load` column (a load above "
              f"the core count means other work shared the cores: those rows are noise-bound); rounds {args.rounds} x {args.runs} runs, median of per-round medians; "
              "peak RSS is VmHWM of the engine's own process after loading and one run "
              f"(the Python interpreter and numpy alone: {floor_mb:.0f} MB). "
              "LiteRT runs Keras models with their own random weights (timing only). "
              "Ratios < 1: faster than onnxruntime / the fastest.", ""]
    md = "\n".join(header + [table(results, t, args.engines) + "\n" for t in sorted({r['threads'] for r in results})])
    print(md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md + "\n")
    versions = {}
    import importlib.metadata as imd
    for d in ("torch", "executorch", "ai-edge-litert", "tensorflow-cpu", "onnxruntime", "onnx", "minibuild"):
        try:
            versions[d] = imd.version(d)
        except imd.PackageNotFoundError:
            versions[d] = None
    args.out.with_suffix(".json").write_text(json.dumps(
        {"started_utc": started.isoformat(), "cpu_count": os.cpu_count(), "loadavg_end": load,
         "loadavg_start": load_start, "versions": versions, "python_numpy_floor_mb": floor_mb, "rounds": args.rounds, "runs": args.runs, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

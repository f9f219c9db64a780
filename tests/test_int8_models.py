"""int8 CNNs quantised in the test by onnxruntime.quantization (quantize_static with a
small random calibration reader) -- QDQ per tensor, QDQ per channel, and the QOperator
form -- from a ResNet-like (torchvision resnet18, 10 classes), MobileNetV2-like
(tests/models.py) and Inception-like (Concat branches, AveragePool, Sigmoid, LeakyRelu) model, built end to end by minibuild for linux on this machine and
run against onnxruntime on the same quantised model.

Accuracy: the float outputs (after the model's final DequantizeLinear) must be within
one quantisation step of onnxruntime's, the step being that DequantizeLinear's scale.
The QDQ build must have lowered every Conv: the manifest lists QLinearConv and no
float Conv; nor any float MaxPool, Concat, AveragePool, Sigmoid or LeakyRelu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import models
from minibuild import ortref
from minibuild import toolchain
from minibuild.pipeline import Options, run_build

ort = pytest.importorskip("onnxruntime")
quant = pytest.importorskip("onnxruntime.quantization")

pytestmark = pytest.mark.skipif(toolchain.host_abi() != "x86_64", reason="linux x86_64 host builds")


def resnet18_layers(widths: list[int], classes: int) -> list:
    """ResNet-18's layout as torch modules: 7x7/2 stem, 3x3/2 MaxPool, four stages of
    two basic blocks (`widths` channels) with 1x1 projection shortcuts,
    GlobalAveragePool, a `classes`-way Linear. bench/bench_int8_cnn.py builds the
    full-width one from it."""
    import torch
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (self.down(x) if self.down is not None else x))

    layers = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for i, c in enumerate(widths):
        layers += [Block(cin, c, 1 if i == 0 else 2), Block(c, c, 1)]
        cin = c
    return layers + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]


def _resnet18(path: Path):
    """ResNet-18's layout at half width, 10 classes; written in torch here
    (torchvision's resnet18 is the same graph at full width)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    layers = resnet18_layers([32, 64, 128, 256], 10)
    torch.manual_seed(0)
    net = nn.Sequential(*layers).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so folding has work to do
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    torch.onnx.export(net, torch.zeros(1, 3, 64, 64), str(path), input_names=["input"], output_names=["logits"],
                      opset_version=13, dynamo=False)


def _inception(path: Path):
    """An Inception-like CNN: a stem, then blocks of parallel 1x1 / 3x3 / average-pool
    branches joined by Concat along channels, stride-2 average pools (one with
    ceil_mode), a LeakyRelu and a Sigmoid branch, GlobalAveragePool and a Linear."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, c):
            super().__init__()
            self.b1 = nn.Sequential(nn.Conv2d(cin, c, 1), nn.ReLU())
            self.b2 = nn.Sequential(nn.Conv2d(cin, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
            self.b3 = nn.Sequential(nn.AvgPool2d(3, 1, 1), nn.Conv2d(cin, c, 1), nn.LeakyReLU(0.1))
            self.b4 = nn.Sequential(nn.Conv2d(cin, c, 1), nn.Sigmoid())

        def forward(self, x):
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), Block(16, 8), nn.AvgPool2d(3, 2, ceil_mode=True),
                        Block(32, 12), nn.AvgPool2d(2, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(48, 10)).eval()
    torch.onnx.export(net, torch.zeros(1, 3, 32, 32), str(path), input_names=["input"], output_names=["logits"],
                      opset_version=13, dynamo=False)


def _mobilenet(path: Path):
    onnx.save(models.mobilenet_v2(size=64, classes=10), str(path))


FLOAT_MODELS = {"resnet18": _resnet18, "mobilenet_v2": _mobilenet, "inception": _inception}


class _Reader(quant.CalibrationDataReader):
    def __init__(self, name: str, shape, n: int = 8, seed: int = 0):
        rng = np.random.default_rng(seed)
        self._it = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self._it, None)


FORMS = {
    "qdq_tensor": dict(quant_format=quant.QuantFormat.QDQ, per_channel=False),
    "qdq_channel": dict(quant_format=quant.QuantFormat.QDQ, per_channel=True),
    "qoperator": dict(quant_format=quant.QuantFormat.QOperator, per_channel=True),
}


def _quantise(src: Path, dst: Path, form: str):
    m = onnx.load(str(src))
    i = m.graph.input[0]
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    quant.quantize_static(str(src), str(dst), _Reader(i.name, shape), activation_type=quant.QuantType.QUInt8,
                          weight_type=quant.QuantType.QInt8, **FORMS[form])


class _FloatModels(dict):
    """Each float model exported once per module, when a test first asks for it."""

    def __init__(self, d: Path):
        super().__init__()
        self.d = d

    def __missing__(self, name):
        self[name] = path = self.d / f"{name}.onnx"
        FLOAT_MODELS[name](path)
        return path


@pytest.fixture(scope="module")
def float_models(tmp_path_factory):
    return _FloatModels(tmp_path_factory.mktemp("int8-float"))


def _last_dq_scale(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that writes the graph output: one step."""
    out = model.graph.output[0].name
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    return float(inits[node.input[1]].reshape(-1)[0])


def _build_and_run(model_path: Path, tmp: Path, feeds: dict):
    mdir = tmp / "models"
    mdir.mkdir()
    (mdir / model_path.name).write_bytes(model_path.read_bytes())
    res = run_build(Options(models=mdir, out=tmp / "out", platforms=["linux"], abis=[toolchain.host_abi()]))
    root = tmp / "out" / "linux" / toolchain.host_abi()
    mrt = root / "models" / (model_path.stem + ".mrt")
    feed_file = tmp / "feeds.npz"
    np.savez(feed_file, **feeds)
    code = ("import minirt, numpy as np, sys; s = minirt.InferenceSession(sys.argv[1]); f = np.load(sys.argv[2]);"
            "y = s.run(None, {k: f[k] for k in f.files}); np.save(sys.argv[3], y[0])")
    got = tmp / "got.npy"
    env = {"PYTHONPATH": str(root / "python"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code, str(mrt), str(feed_file), str(got)], env=env,
                         capture_output=True, text=True, cwd=tmp)
    assert run.returncode == 0, run.stderr
    return res, np.load(got)


# The QOperator ResNet keeps MaxPool on uint8 (onnxruntime.quantization does not
# requantise a max): the uint8 MaxPool kernel serves it.
CASES = [(n, f) for n in sorted(FLOAT_MODELS) for f in sorted(FORMS)]


@pytest.mark.parametrize("name, form", CASES)
def test_quantised_cnn_matches_onnxruntime(float_models, tmp_path, name, form):
    qpath = tmp_path / f"{name}_{form}.onnx"
    _quantise(float_models[name], qpath, form)
    qmodel = onnx.load(str(qpath))
    i = qmodel.graph.input[0]
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ref = ortref.reference_session(str(qpath)).run(None, {i.name: x})[0]
    res, got = _build_and_run(qpath, tmp_path, {i.name: x})
    step = _last_dq_scale(qmodel)
    dev = float(np.max(np.abs(got - ref))) / step
    print(f"{name} {form}: max deviation {dev:.3f} quantisation steps (step {step:g})")
    (tmp_path.parent / f"int8-{name}-{form}.json").write_text(json.dumps({"steps": dev}))
    assert got.shape == ref.shape
    assert dev <= 1.0 + 1e-3, f"{name} {form}: {dev} steps"
    ops = {(e.domain, e.op) for e in res.scan.manifest.entries}
    assert ("ai.onnx", "QLinearConv") in ops, ops
    assert ("ai.onnx", "Conv") not in ops and ("ai.minibuild", "FusedConv") not in ops, ops
    # MaxPool runs on the int8 value (the QDQ pair around it dropped); Concat, AveragePool,
    # Sigmoid and LeakyRelu become their QLinear forms: none of them is left in float
    floats = {(e.op, s) for e in res.scan.manifest.entries for s in e.signatures if "float32" in s}
    left = {op for op, _ in floats} & {"MaxPool", "Concat", "AveragePool", "Sigmoid", "LeakyRelu", "GlobalAveragePool"}
    assert not left, floats
    if name == "inception":
        entries = {e.op: e for e in res.scan.manifest.entries}
        for op in ("QLinearConcat", "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu"):
            assert op in entries, sorted(entries)
        if form != "qoperator":  # lowered at build time: each node keeps the float node's name and
            # records the DequantizeLinear / QuantizeLinear nodes it replaced
            names = {n.name: n.op_type for n in qmodel.graph.node}
            for op, orig in (("QLinearConcat", "Concat"), ("QLinearAveragePool", "AveragePool"),
                             ("QLinearSigmoid", "Sigmoid"), ("QLinearLeakyRelu", "LeakyRelu")):
                assert entries[op].origins, op
                for (_, node), recs in entries[op].origins.items():
                    assert names.get(node) == orig, (op, node)
                    assert any(o.startswith("QuantizeLinear ") for _, o in recs), (op, recs)
                    assert all(why == f"QDQ group lowered to {op}" for why, _ in recs), (op, recs)

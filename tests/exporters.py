"""Models as users export them: torchvision CNNs and segmenters, Hugging Face
transformers encoders from small configs, written by `torch.onnx.export` with the
TorchScript exporter (`dynamo=False`) or the default dynamo one (`dynamo=True`,
opset 18+, weights in NAME.onnx.data).

Weights are random (seeded); nothing is downloaded. Normalisation layers get
random statistics and affine parameters too, so Conv+BN folding and LayerNorm
fusion compute something that a wrong rewrite would change.

Exports are slow (seconds to tens of seconds each), so `export_family` keeps them
in a cache folder keyed by the torch / transformers / torchvision versions and this
file's own text: a second test session re-exports nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

# Families: one model folder, one build each.
CNN = "cnn"                  # torchvision classifiers and segmenters, TorchScript exporter
TRANSFORMER = "transformer"  # transformers encoders, TorchScript exporter
DYNAMO = "dynamo"            # the default torch.onnx exporter (dynamo=True, external data)
FAMILIES = (CNN, TRANSFORMER, DYNAMO)

TORCHSCRIPT_OPSET = 17


@dataclass(frozen=True)
class ModelSpec:
    name: str                         # the .onnx file's stem, unique across families
    family: str
    make: Callable                    # () -> (torch.nn.Module, tuple of example tensors)
    input_names: tuple
    output_names: tuple
    feeds: Callable                   # (numpy Generator) -> {input name: array}
    needs: tuple = ("torch",)         # modules the maker imports (tests skip without them)
    dynamo: bool = False
    dynamic_axes: dict | None = None  # {input: {axis: dim name}}: exported dynamic, fixed by the build
    notes: str = ""

    def fixed_dims(self) -> dict:
        """The `--fix-dim NAME=N` a build of this model needs: each dynamic dim at
        the size the test feeds have."""
        feeds = self.feeds(np.random.default_rng(0))
        return {name: int(feeds[inp].shape[axis]) for inp, axes in (self.dynamic_axes or {}).items()
                for axis, name in axes.items()}


# --- torch helpers -------------------------------------------------------------------

def _torch():
    import torch
    return torch


_TV_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"


def import_torchvision():
    """torchvision, importable beside the CPU torch. PyPI's torchvision is a CUDA
    build: beside the CPU torch its C extension does not load, and its import then
    fails registering fake kernels for `torchvision::nms` and `torchvision::qnms`,
    which no library defined. Then define those two schemas (the ones torchvision's
    C++ registers; the models never call them) and import again. transformers
    imports torchvision itself where it is installed (Whisper's modules do), so
    every maker calls this first."""
    _torch()
    try:
        import torchvision
        return torchvision
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
    for name in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[name]
    torch = _torch()
    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}", _TV_SCHEMA)
        except RuntimeError:
            pass  # defined already
    import torchvision
    return torchvision


def _torchvision_if_installed():
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()


def _perturb_norms(module, seed: int):
    """Random running statistics and affine parameters for every BatchNorm /
    LayerNorm / GroupNorm: fresh modules have mean 0, var 1, weight 1, bias 0, which
    would let a broken Conv+BN fold or LayerNorm fusion pass unnoticed."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return module


def _outputs(module, fields, kwargs_names=None):
    """`module`, whose forward returns a dict / ModelOutput, as a module returning the
    tuple of the named fields, so the ONNX graph has plain named outputs. With
    `kwargs_names` the positional inputs are passed on as those keyword arguments."""
    torch = _torch()

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            out = self.inner(**dict(zip(kwargs_names, args))) if kwargs_names else self.inner(*args)
            return tuple(out[f] for f in fields)

    return Outputs()


def _ready(module, seed):
    module.eval()
    return _perturb_norms(module, seed)


# --- torchvision models --------------------------------------------------------------

IMAGE = (1, 3, 128, 128)


def _image_feeds(shape=IMAGE):
    return lambda rng: {"image": rng.standard_normal(shape).astype(np.float32)}


def _tv_classifier(builder: str, seed: int, **kw):
    def make():
        torch = _torch()
        tv = import_torchvision()
        torch.manual_seed(seed)
        m = _ready(getattr(tv.models, builder)(weights=None, **kw), seed)
        return m, (torch.randn(*IMAGE),)
    return make


def _tv_segmenter(builder: str, seed: int):
    def make():
        torch = _torch()
        tv = import_torchvision()
        torch.manual_seed(seed)
        m = getattr(tv.models.segmentation, builder)(weights=None, weights_backbone=None, num_classes=21)
        return _outputs(_ready(m, seed), ["out"]), (torch.randn(*IMAGE),)
    return make


# --- transformers models -------------------------------------------------------------

SEQ = 64
VOCAB = 1000


def _text_feeds(rng):
    ids = rng.integers(0, VOCAB, size=(1, SEQ)).astype(np.int64)
    mask = np.ones((1, SEQ), np.int64)
    mask[0, SEQ - SEQ // 4:] = 0  # the last quarter is padding
    return {"input_ids": ids, "attention_mask": mask}


def _text_example():
    torch = _torch()
    rng = np.random.default_rng(0)
    return tuple(torch.from_numpy(v) for v in _text_feeds(rng).values())


def _bert(seed: int):
    def make():
        torch = _torch()
        _torchvision_if_installed()
        from transformers import BertConfig, BertModel
        torch.manual_seed(seed)
        cfg = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=512, max_position_embeddings=128)
        m = _ready(BertModel(cfg), seed)
        return _outputs(m, ["last_hidden_state", "pooler_output"], ["input_ids", "attention_mask"]), _text_example()
    return make


def _distilbert(seed: int):
    def make():
        torch = _torch()
        _torchvision_if_installed()
        from transformers import DistilBertConfig, DistilBertModel
        torch.manual_seed(seed)
        cfg = DistilBertConfig(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=2, hidden_dim=512,
                               max_position_embeddings=128)
        m = _ready(DistilBertModel(cfg), seed)
        return _outputs(m, ["last_hidden_state"], ["input_ids", "attention_mask"]), _text_example()
    return make


VIT_IMAGE = (1, 3, 64, 64)


def _vit(seed: int):
    def make():
        torch = _torch()
        _torchvision_if_installed()
        from transformers import ViTConfig, ViTForImageClassification
        torch.manual_seed(seed)
        cfg = ViTConfig(image_size=64, patch_size=16, num_channels=3, hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=512, num_labels=10)
        m = _ready(ViTForImageClassification(cfg), seed)
        return _outputs(m, ["logits"], ["pixel_values"]), (torch.randn(*VIT_IMAGE),)
    return make


WHISPER_FEATURES = (1, 80, 128)   # 80 mel bins, 128 frames = 2 * max_source_positions


def _whisper_encoder(seed: int):
    def make():
        torch = _torch()
        _torchvision_if_installed()
        from transformers import WhisperConfig, WhisperModel
        torch.manual_seed(seed)
        cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=128, encoder_layers=2, encoder_attention_heads=2,
                            encoder_ffn_dim=256, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=256,
                            max_source_positions=WHISPER_FEATURES[2] // 2, max_target_positions=32,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        enc = _ready(WhisperModel(cfg).encoder, seed)
        return _outputs(enc, ["last_hidden_state"], ["input_features"]), (torch.randn(*WHISPER_FEATURES),)
    return make


AUDIO = (1, 4000)


def _wav2vec2(seed: int):
    def make():
        torch = _torch()
        _torchvision_if_installed()
        from transformers import Wav2Vec2Config, Wav2Vec2Model
        torch.manual_seed(seed)
        cfg = Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                             conv_dim=(64, 64, 64), conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4),
                             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32)
        m = _ready(Wav2Vec2Model(cfg), seed)
        return _outputs(m, ["last_hidden_state"], ["input_values"]), (torch.randn(*AUDIO),)
    return make


def _feeds_for(name, shape):
    return lambda rng: {name: rng.standard_normal(shape).astype(np.float32)}


TV = ("torch", "torchvision")
HF = ("torch", "transformers")

SPECS: dict[str, ModelSpec] = {s.name: s for s in [
    # float CNNs and segmenters (TorchScript exporter, opset 17)
    ModelSpec("mobilenet_v3_small", CNN, _tv_classifier("mobilenet_v3_small", 1), ("image",), ("logits",),
              _image_feeds(), TV, notes="HardSwish, HardSigmoid SE blocks"),
    ModelSpec("mnasnet0_5", CNN, _tv_classifier("mnasnet0_5", 2), ("image",), ("logits",), _image_feeds(), TV),
    ModelSpec("efficientnet_b0", CNN, _tv_classifier("efficientnet_b0", 3), ("image",), ("logits",),
              _image_feeds(), TV, notes="SiLU, sigmoid SE blocks"),
    ModelSpec("lraspp_mobilenet_v3_large", CNN, _tv_segmenter("lraspp_mobilenet_v3_large", 4), ("image",), ("out",),
              _image_feeds(), TV, notes="Resize, pooled-branch sigmoid gate"),
    ModelSpec("deeplabv3_mobilenet_v3_large", CNN, _tv_segmenter("deeplabv3_mobilenet_v3_large", 5), ("image",),
              ("out",), _image_feeds(), TV, notes="ASPP: dilated convs, ReduceMean pooling, Resize"),
    # transformer encoders (TorchScript exporter, opset 17)
    ModelSpec("bert_small", TRANSFORMER, _bert(10), ("input_ids", "attention_mask"),
              ("last_hidden_state", "pooler_output"), _text_feeds, HF),
    ModelSpec("bert_small_dynamic_axes", TRANSFORMER, _bert(10), ("input_ids", "attention_mask"),
              ("last_hidden_state", "pooler_output"), _text_feeds, HF,
              dynamic_axes={k: {0: "batch", 1: "sequence"} for k in ("input_ids", "attention_mask")},
              notes="dynamic batch and sequence, fixed with --fix-dim"),
    ModelSpec("distilbert_small", TRANSFORMER, _distilbert(11), ("input_ids", "attention_mask"),
              ("last_hidden_state",), _text_feeds, HF),
    ModelSpec("vit_small", TRANSFORMER, _vit(12), ("pixel_values",), ("logits",),
              _feeds_for("pixel_values", VIT_IMAGE), HF),
    ModelSpec("whisper_encoder", TRANSFORMER, _whisper_encoder(13), ("input_features",), ("last_hidden_state",),
              _feeds_for("input_features", WHISPER_FEATURES), HF),
    ModelSpec("wav2vec2_small", TRANSFORMER, _wav2vec2(14), ("input_values",), ("last_hidden_state",),
              _feeds_for("input_values", AUDIO), HF),
    # the default exporter: dynamo=True, opset 18+, external data
    ModelSpec("bert_small_dynamo", DYNAMO, _bert(10), ("input_ids", "attention_mask"),
              ("last_hidden_state", "pooler_output"), _text_feeds, HF, dynamo=True),
    ModelSpec("bert_small_dynamo_dynamic", DYNAMO, _bert(10), ("input_ids", "attention_mask"),
              ("last_hidden_state", "pooler_output"), _text_feeds, HF, dynamo=True,
              dynamic_axes={k: {1: "sequence"} for k in ("input_ids", "attention_mask")},
              notes="dynamic sequence (torch.export.Dim), fixed with --fix-dim"),
    ModelSpec("vit_small_dynamo", DYNAMO, _vit(12), ("pixel_values",), ("logits",),
              _feeds_for("pixel_values", VIT_IMAGE), HF, dynamo=True),
    ModelSpec("distilbert_small_dynamo", DYNAMO, _distilbert(11), ("input_ids", "attention_mask"),
              ("last_hidden_state",), _text_feeds, HF, dynamo=True),
    ModelSpec("whisper_encoder_dynamo", DYNAMO, _whisper_encoder(13), ("input_features",), ("last_hidden_state",),
              _feeds_for("input_features", WHISPER_FEATURES), HF, dynamo=True),
    ModelSpec("wav2vec2_small_dynamo", DYNAMO, _wav2vec2(14), ("input_values",), ("last_hidden_state",),
              _feeds_for("input_values", AUDIO), HF, dynamo=True),
    ModelSpec("mobilenet_v3_small_dynamo", DYNAMO, _tv_classifier("mobilenet_v3_small", 1), ("image",), ("logits",),
              _image_feeds(), TV, dynamo=True),
    ModelSpec("lraspp_mobilenet_v3_large_dynamo", DYNAMO, _tv_segmenter("lraspp_mobilenet_v3_large", 4), ("image",),
              ("out",), _image_feeds(), TV, dynamo=True, notes="Resize at opset 18+"),
]}


def specs(family: str) -> list[ModelSpec]:
    return [s for s in SPECS.values() if s.family == family]


def missing_modules(spec: ModelSpec) -> list[str]:
    out = []
    for mod in spec.needs:
        try:
            if mod == "torchvision":
                import_torchvision()
            else:
                importlib.import_module(mod)
        except Exception:
            out.append(mod)
    return out


# --- export --------------------------------------------------------------------------

def export(spec: ModelSpec, path: Path) -> None:
    """Write `spec`'s model to `path` the way a user would call torch.onnx.export."""
    torch = _torch()
    module, args = spec.make()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        names = dict(input_names=list(spec.input_names), output_names=list(spec.output_names))
        if spec.dynamo:
            dims = {}
            if spec.dynamic_axes:  # one torch.export.Dim per name; the module takes *args
                shapes = tuple({axis: dims.setdefault(name, torch.export.Dim(name, min=2, max=1 << 16))
                                for axis, name in spec.dynamic_axes.get(inp, {}).items()} or None
                               for inp in spec.input_names)
                names["dynamic_shapes"] = (shapes,)
            torch.onnx.export(module, args, str(path), dynamo=True, external_data=True, **names)
        else:
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                              dynamic_axes=spec.dynamic_axes, **names)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_key() -> str:
    parts = {d: _version(d) for d in ("torch", "transformers", "torchvision", "onnx", "onnxscript")}
    parts["exporters.py"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def export_cached(spec: ModelSpec, cache_root: Path) -> tuple[Path, float]:
    """The folder holding `spec.name`.onnx (and its .data), exported once per cache
    key; returns it and the seconds the export took (0.0 when cached)."""
    done = Path(cache_root) / cache_key() / spec.name
    if (done / f"{spec.name}.onnx").is_file():
        return done, 0.0
    done.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=done.parent))
    t0 = time.monotonic()
    try:
        export(spec, tmp / f"{spec.name}.onnx")
        seconds = time.monotonic() - t0
        (tmp / "export.json").write_text(json.dumps({"seconds": seconds, "dynamo": spec.dynamo}))
        try:
            os.rename(tmp, done)
        except OSError:  # another session finished the same export first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return done, seconds


def model_files(folder: Path, name: str) -> list[Path]:
    """The .onnx file and the external-data files beside it."""
    return sorted(p for p in Path(folder).iterdir() if p.name == f"{name}.onnx" or p.name.startswith(f"{name}.onnx."))


# --- comparison ----------------------------------------------------------------------

REL_TO_RANGE = 1e-4


def span(ref: np.ndarray) -> float:
    """The output's range (max - min); a constant output is judged against its magnitude."""
    if not ref.size:
        return 0.0
    r = float(ref.max()) - float(ref.min())
    return r if r > 0 else float(np.abs(ref).max())


@dataclass
class OutputResult:
    name: str
    shape: tuple
    max_abs_err: float
    range: float

    @property
    def rel(self) -> float:
        return self.max_abs_err / self.range if self.range else (0.0 if self.max_abs_err == 0 else float("inf"))

    @property
    def ok(self) -> bool:
        return np.isfinite(self.max_abs_err) and self.max_abs_err <= REL_TO_RANGE * max(self.range, 1e-30)


def compare_outputs(names, got, ref) -> list[OutputResult]:
    out = []
    for name, g, r in zip(names, got, ref):
        g, r = np.asarray(g), np.asarray(r)
        if g.shape != r.shape:
            out.append(OutputResult(name, tuple(r.shape), float("inf"), span(r.astype(np.float64))))
            continue
        r64 = r.astype(np.float64)
        err = float(np.abs(g.astype(np.float64) - r64).max()) if r.size else 0.0
        if not np.all(np.isfinite(g)):
            err = float("inf")
        out.append(OutputResult(name, tuple(r.shape), err, span(r64)))
    return out


@dataclass
class FamilyRun:
    """One family's models: exported, each selected on its own, the selectable ones
    built together."""
    folder: Path
    export_seconds: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)   # model -> message (export / scan / select)
    build: object = None                          # pipeline.BuildResult of the models without errors
    build_error: str | None = None
    build_seconds: float = 0.0
    out: Path | None = None

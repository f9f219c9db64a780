"""Our manifest against onnxruntime's reduced-build config for the nine model-zoo
light models. onnxruntime's converter (`convert_onnx_models_to_ort
--enable_type_reduction`) writes the operators its runtime needs after its own
optimisations; ours is computed after minibuild's build-time rewrites. Every
difference must be explained by one of the rewrites below, model by model."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import models
from minibuild import manifest, registry, scan

REG = registry.load()

# Ops that minibuild folds away at build time and onnxruntime may keep:
#  BatchNormalization after a constant Conv -> folded into its weights;
#  Mul/Add by a per-channel constant after Conv/BN -> folded into weights/bias;
#  Conv/Relu that then fuse -> ai.minibuild.FusedConv (with a residual Add).
FOLDED = {"BatchNormalization", "Mul", "Add", "Conv", "Relu"}


def parse_config(text: str) -> dict[tuple[str, str], tuple[int, frozenset]]:
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        domain, opset, ops = line.split(";", 2)
        for m in re.finditer(r"(\w+)(\{.*?\}\})?(?:,|$)", ops):
            types = frozenset(re.findall(r'"(\w+)"', m.group(2) or "")) - {"inputs", "outputs"} - set("0123456789")
            out[(domain, m.group(1))] = (int(opset), types)
    return out


def explain(key, ort_only, ours_only, ours, original_ops) -> str | None:
    domain, op = key
    if domain == "com.microsoft" and ("ai.minibuild", op) in ours:
        return f"same fusion; minibuild's kernel lives in its own domain ai.minibuild.{op}"
    if domain == "ai.minibuild" and ("com.microsoft", op) in ort_only:
        return f"same fusion as onnxruntime's com.microsoft.{op}"
    if key == ("ai.onnx", "Sum") and ("ai.onnx", "Add") in ours:
        return "minibuild rewrites Sum as a chain of Add (one kernel serves both)"
    if key == ("ai.onnx", "Sum") and ("ai.onnx", "Add") not in ours and ("ai.minibuild", "FusedConv") in ours:
        return "minibuild rewrites Sum as Add, and an Add of a convolution's output fuses into FusedConv (residual)"
    if key == ("ai.onnx", "Add") and key in ours_only and "Sum" in original_ops:
        return "Add comes from the Sum -> Add rewrite"
    if domain == "ai.onnx" and op in FOLDED and key in ort_only and op in original_ops and ("ai.minibuild", "FusedConv") in ours:
        return f"{op} folded into convolution weights/bias or fused into FusedConv at build time"
    return None


@pytest.mark.parametrize("path", models.light_model_paths(), ids=lambda p: Path(p).stem)
def test_manifest_matches_onnxruntime_config(path, tmp_path, capsys):
    work = tmp_path / "m"
    work.mkdir()
    shutil.copy(path, work)
    res = subprocess.run([sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort",
                          "--enable_type_reduction", str(work)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    ort = parse_config((work / "required_operators_and_types.config").read_text())

    sm = scan.scan_model(Path(path), REG)
    mf = manifest.build([sm], scan.needs(sm, REG))
    ours = parse_config(mf.to_ort_config())
    original_ops = {n.op_type for n in onnx.load(path).graph.node}

    ort_only = set(ort) - set(ours)
    ours_only = set(ours) - set(ort)
    unexplained, notes = [], []
    for key in sorted(ort_only | ours_only):
        why = explain(key, ort_only, ours_only, ours, original_ops)
        (notes if why else unexplained).append(f"{'ORT' if key in ort_only else 'ours'} only {key[0]}.{key[1]}: {why}")
    for key in set(ort) & set(ours):
        (ort_opset, ort_types), (our_opset, our_types) = ort[key], ours[key]
        if ort_opset != our_opset:
            unexplained.append(f"{key}: opset {ort_opset} vs ours {our_opset}")
        if not ort_types <= our_types:
            unexplained.append(f"{key}: onnxruntime needs types {sorted(ort_types)}, ours {sorted(our_types)}")
    with capsys.disabled():
        print(f"\n{Path(path).stem}: {len(set(ort) & set(ours))} ops in common; " + ("; ".join(notes) or "identical"))
    assert unexplained == []
    assert len(set(ort) & set(ours)) >= 3

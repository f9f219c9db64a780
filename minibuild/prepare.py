"""One model's way from ONNX to the compact model format:

    check + static shapes -> optimise -> needs -> select -> convert

A build runs these steps over a whole folder (pipeline.run_scan selects all models
at once, so every missing kernel is reported together); `minibuild verify` and the
test harness run them on one in-memory model. Both go through the functions here,
so a model is checked, rewritten and converted the same way wherever it comes from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from . import convert, manifest as manifest_mod, scan
from .registry import Registry


@dataclass
class Prepared:
    model: scan.ScannedModel
    needs: list[scan.NodeNeed]
    data: bytes            # the .mrt file


def convert_model(model: scan.ScannedModel, needs: list[scan.NodeNeed]) -> bytes:
    """The compact model file of an optimised model, from its own needs."""
    return convert.convert(model.graph, [n for n in needs if n.model == model.name])


def prepare(model: onnx.ModelProto, source: Path | str, registry: Registry, fixed_dims=None,
            input_shapes=None) -> Prepared:
    """Check, optimise, select and convert one in-memory model. Raises ModelError for
    a bad model and UnsupportedOpsError (naming node, op, opset, type) for a missing kernel."""
    graph = scan.graph_from_proto(model, str(source), fixed_dims, input_shapes)
    sm = scan.optimise_graph(graph, Path(source), registry)
    needs = scan.needs(sm, registry)
    manifest_mod.select(registry, [sm], needs)
    return Prepared(sm, needs, convert_model(sm, needs))

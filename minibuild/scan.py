"""Scan: load every model of a folder, optimise it, and collect what each node needs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import onnx

from . import domains, optimize
from .errors import ModelError
from .registry import DTYPE_BY_ONNX, Registry


@dataclass
class ScannedModel:
    path: Path
    name: str
    sha256: str
    graph: optimize.Graph


@dataclass(frozen=True)
class NodeNeed:
    """One node's request to the runtime: the manifest is the union of these."""

    model: str
    node: str
    domain: str    # "ai.onnx" or "ai.minibuild"
    op: str
    opset: int     # the operator's since_version
    dtype: str     # element type of the registry's type constraint (or input 0's)
    type_constraint: str


def find_models(models_dir: Path) -> list[Path]:
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise ModelError(f"{models_dir}: not a folder; pass the folder holding your .onnx files with --models")
    paths = sorted(p for p in models_dir.rglob("*.onnx") if p.is_file())
    if not paths:
        raise ModelError(f"{models_dir}: no .onnx files found")
    names = {}
    for p in paths:
        if p.stem in names:
            raise ModelError(f"{p}: two models are named '{p.stem}' ({names[p.stem]}); model names must be unique")
        names[p.stem] = p
    return paths


def load_model(path: Path, fixed_dims=None, input_shapes=None) -> tuple[optimize.Graph, str]:
    data = Path(path).read_bytes()
    try:
        model = onnx.load_from_string(data)
    except Exception as e:
        raise ModelError(f"{path}: not a valid ONNX model: {e}") from None
    return graph_from_proto(model, str(path), fixed_dims, input_shapes), hashlib.sha256(data).hexdigest()


def graph_from_proto(model: onnx.ModelProto, source: str, fixed_dims=None, input_shapes=None) -> optimize.Graph:
    """Check a loaded model against the ONNX spec and give it static shapes: the one
    entry every model takes, whether read from a file or made in memory."""
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelError(f"{source}: not a valid ONNX model: {e}") from None
    return optimize.from_model(model, source, fixed_dims, input_shapes)


def scan_model(path: Path, registry: Registry, fixed_dims=None, input_shapes=None) -> ScannedModel:
    graph, digest = load_model(path, fixed_dims, input_shapes)
    return optimise_graph(graph, Path(path), registry, digest)


def optimise_graph(graph: optimize.Graph, path: Path, registry: Registry, sha256: str = "") -> ScannedModel:
    """Every build-time rewrite, with the registry's operators as the ones available."""
    optimize.optimize(graph, set(registry.ops))
    return ScannedModel(path=Path(path), name=Path(path).stem, sha256=sha256, graph=graph)


def node_dtype(graph: optimize.Graph, node, entry) -> str:
    where, idx = entry.type_from if entry else ("input", 0)
    names = node.input if where == "input" else node.output
    if idx >= len(names) or not names[idx]:
        return "undefined"
    elem = graph.value_info.get(names[idx], (0, None))[0]
    return DTYPE_BY_ONNX.get(elem, onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "undefined")


def needs(model: ScannedModel, registry: Registry) -> list[NodeNeed]:
    out = []
    g = model.graph
    for node in g.nodes:
        domain = domains.canonical(node.domain)
        entry = registry.get(domain, node.op_type)
        out.append(NodeNeed(
            model=model.name, node=node.name, domain=domain, op=node.op_type,
            opset=optimize.since_version(g, node), dtype=node_dtype(g, node, entry),
            type_constraint=entry.type_constraint if entry else "T",
        ))
    return out

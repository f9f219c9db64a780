"""Seed models for the fuzzers, one per kernel family, small enough that a mutated
copy loads, prepares and runs in well under a millisecond (the weights are tiny:
the fuzzers mutate structure, and every byte of weights costs checksum time).

    python tests/fuzz/seeds.py OUT_DIR      writes OUT_DIR/<name>.mrt, says what it skipped

Each seed is an ONNX graph built with onnx.helper and converted the way a build
converts it (minibuild.testing.convert_model): optimised, shapes fixed, the memory
plan written. A seed whose operators are not (yet) in the registry is skipped with
the names of the missing ones, so the seed set grows with the registry.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


@dataclass
class Seed:
    name: str
    ops: set[str]                         # ai.onnx ops (and ai.minibuild ones as "ai.minibuild.X") it needs
    build: Callable[[], tuple[onnx.ModelProto, dict, list[str]]]  # model, feeds, constant inputs
    fused_ops: set[str] = field(default_factory=set)  # ops the build's fusions make ...
    fused_from: set[str] = field(default_factory=set)  # ... out of these, which then are gone

    def converted_ops(self) -> set[str]:
        """The ops the converted model holds."""
        return (self.ops - self.fused_from) | self.fused_ops


def _rng(seed):
    return np.random.default_rng(seed)


def _model(nodes, inputs, outputs, inits, opset, domains=()):
    graph = helper.make_graph(nodes, "fuzz_seed", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 9
    # Output shapes as onnx infers them: the build wants static shapes.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if out.name in known:
            out.type.CopyFrom(known[out.name].type)
    return model


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def transformer():
    """One attention + MLP block at opset 20: batched MatMul (rank 3 and a broadcast
    rank-4 head split), Softmax, LayerNormalization with a bias, Gelu (both the
    tanh and the exact form), Erf, Pow, ReduceSum/Mean/Max with axes inputs."""
    r = _rng(11)
    t, d, h = 5, 8, 16
    w = lambda *s: (r.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "scale": np.array(0.35, np.float32),
             "g": w(d) + 1, "b": w(d), "w1": w(d, h), "b1": w(h), "w2": w(h, d),
             "heads": np.array([1, t, 2, d // 2], np.int64), "two": np.array(2.0, np.float32),
             "ax_last": np.array([-1], np.int64), "ax_mid": np.array([1], np.int64),
             "ax_both": np.array([0, 2], np.int64), "wh": w(1, 2, d // 2, 3)}
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["ctx"]),
        helper.make_node("Add", ["ctx", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Gelu", ["h1"], ["h2"], approximate="tanh"),
        helper.make_node("Gelu", ["h1"], ["h3"]),
        helper.make_node("Erf", ["h3"], ["h4"]),
        helper.make_node("Add", ["h2", "h4"], ["h5"]),
        helper.make_node("MatMul", ["h5", "w2"], ["m"]),
        helper.make_node("Pow", ["m", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "ax_last"], ["var"], keepdims=1),
        helper.make_node("ReduceSum", ["m", "ax_mid"], ["sum"], keepdims=0),
        helper.make_node("ReduceMax", ["m", "ax_both"], ["mx"], keepdims=1),
        # A head split: [1, t, 2, d/2] -> [1, 2, t, d/2], times a broadcast [1, 2, d/2, 3].
        helper.make_node("Reshape", ["ln", "heads"], ["lh"]),
        helper.make_node("Transpose", ["lh"], ["lt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["lt", "wh"], ["hm"]),
    ]
    x = r.standard_normal((1, t, d)).astype(np.float32)
    outputs = [_vi(n, F, None) for n in ("var", "sum", "mx", "hm")]
    return _model(nodes, [_vi("x", F, x.shape)], outputs, inits, 20), {"x": x}, []


def vision():
    """Resize (linear with scales, nearest with sizes, cubic), ConvTranspose (strided,
    padded, grouped), PRelu with a per-channel slope, Mish and the Sigmoid*x pattern
    the build fuses into ai.minibuild.SiLU; one antialiased Resize takes its scales at
    run time."""
    r = _rng(12)
    c = 4
    inits = {"roi": np.array([], np.float32), "sc2": np.array([1, 1, 2, 2], np.float32),
             "sizes": np.array([1, c, 7, 5], np.int64), "sc15": np.array([1, 1, 1.5, 1.5], np.float32),
             "wt": (r.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32),
             "bt": r.standard_normal(3).astype(np.float32),
             "wg": (r.standard_normal((c, 1, 2, 2)) * 0.3).astype(np.float32),
             "slope": (r.standard_normal((3, 1, 1)) * 0.2).astype(np.float32)}
    nodes = [
        helper.make_node("Resize", ["x", "roi", "sc2"], ["up"], mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Resize", ["x", "roi", "", "sizes"], ["nn"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Resize", ["x", "roi", "sc15"], ["cu"], mode="cubic",
                         coordinate_transformation_mode="align_corners"),
        helper.make_node("ConvTranspose", ["up", "wt", "bt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 0]),
        helper.make_node("PRelu", ["ct", "slope"], ["pr"]),
        helper.make_node("Mish", ["pr"], ["mi"]),
        helper.make_node("ConvTranspose", ["nn", "wg"], ["cg"], group=c, strides=[1, 2], dilations=[2, 1]),
        helper.make_node("Sigmoid", ["cg"], ["sg"]),
        helper.make_node("Mul", ["cg", "sg"], ["si"]),
        # Scales fed at run time (the output size is fixed at build time): an
        # antialiased downsample whose filter tables are built on every run.
        helper.make_node("Resize", ["x", "roi", "rs"], ["dn"], mode="linear", antialias=1),
    ]
    x = r.standard_normal((1, c, 6, 4)).astype(np.float32)  # 1.5x stays integral
    rs = np.array([1, 1, 0.5, 0.5], np.float32)
    outputs = [_vi(n, F, None) for n in ("mi", "si", "cu")] + [_vi("dn", F, [1, c, 3, 2])]
    inputs = [_vi("x", F, x.shape), _vi("rs", F, rs.shape)]
    return _model(nodes, inputs, outputs, inits, 19), {"x": x, "rs": rs}, []


def typed():
    """The typed kernels a tokenised model needs: Gather of an embedding table by
    run-time int64 ids (and by constant int32 ones), Equal against a constant, Where
    on the bool mask, Cast float32 -> int64 -> float32, Expand to a bigger shape."""
    r = _rng(13)
    inits = {"table": r.standard_normal((10, 6)).astype(np.float32),
             "cids": np.array([[1, -2], [0, 9]], np.int32),
             "pad": np.array(0, np.int64), "zero": np.zeros((1, 6), np.float32),
             "eshape": np.array([2, 4, 6], np.int64)}
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Gather", ["table", "cids"], ["cemb"], axis=0),
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Unsqueeze", ["is_pad", "ax1"], ["mask"]),
        helper.make_node("Where", ["mask", "zero", "emb"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["mi"], to=TensorProto.INT64),
        helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Expand", ["mf", "eshape"], ["y"]),
        helper.make_node("Gather", ["cemb", "ids"], ["y2"], axis=2),
    ]
    inits["ax1"] = np.array([1], np.int64)
    ids = np.array([3, 0, 5, 1], np.int64)
    outputs = [_vi("y", F, None), _vi("y2", F, None)]
    model = _model(nodes, [_vi("ids", TensorProto.INT64, ids.shape)], outputs, inits, 13)
    return model, {"ids": ids}, []


def typed_logic():
    """Comparisons, boolean logic and the rest of the typed copies: Less/Greater on
    int64 and float32, And/Or/Not, IsNaN, GatherElements and GatherND on run-time
    indices, Cast bool -> float32. (Range is not here: its inputs must be build-time
    constants, so the build folds it and no converted model contains it.)"""
    r = _rng(14)
    inits = {"lim": np.array(2, np.int64), "half": np.array(0.0, np.float32),
             "scale": np.array([1.0, 1.5, 2.0, 2.5, 3.0], np.float32)}
    nodes = [
        helper.make_node("Less", ["ids", "lim"], ["lt"]),
        helper.make_node("Greater", ["x", "half"], ["gt"]),
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("Not", ["nan"], ["ok"]),
        helper.make_node("And", ["gt", "ok"], ["pos"]),
        helper.make_node("Or", ["pos", "lt"], ["any"]),
        helper.make_node("Cast", ["any"], ["anyf"], to=TensorProto.FLOAT),
        helper.make_node("GatherElements", ["x", "ids"], ["ge"], axis=1),
        helper.make_node("Add", ["ge", "anyf"], ["y"]),
        helper.make_node("GatherND", ["x", "nd"], ["gnd"], batch_dims=0),
        helper.make_node("Mul", ["gnd", "scale"], ["y2"]),
    ]
    x = r.standard_normal((3, 5)).astype(np.float32)
    ids = np.array([[0, 4, 1, 2, 3], [1, 1, 0, -1, 2], [4, 3, 2, 1, 0]], np.int64)
    nd = np.array([[0, 1], [2, 4], [1, 3], [0, 0], [2, 2]], np.int64)
    inputs = [_vi("x", F, x.shape), _vi("ids", TensorProto.INT64, ids.shape), _vi("nd", TensorProto.INT64, nd.shape)]
    outputs = [_vi("y", F, None), _vi("y2", F, None)]
    return _model(nodes, inputs, outputs, inits, 13), {"x": x, "ids": ids, "nd": nd}, []


SEEDS = [
    Seed("transformer", {"MatMul", "Transpose", "Mul", "Softmax", "Add", "LayerNormalization", "Gelu", "Erf",
                         "Pow", "ReduceMean", "ReduceSum", "ReduceMax", "Reshape"}, transformer),
    Seed("vision", {"Resize", "ConvTranspose", "PRelu", "Mish", "Sigmoid", "Mul"}, vision,
         fused_ops={"ai.minibuild.SiLU"}, fused_from={"Sigmoid", "Mul"}),
    Seed("typed", {"Gather", "Equal", "Unsqueeze", "Where", "Cast", "Expand"}, typed),
    Seed("typed_logic", {"Less", "Greater", "IsNaN", "Not", "And", "Or", "Cast", "GatherElements", "Add",
                         "GatherND", "Mul"}, typed_logic),
]


def missing_ops(seed: Seed, registry) -> list[str]:
    have = {op if dom == "ai.onnx" else f"{dom}.{op}" for dom, op in registry.ops}
    return sorted((seed.ops | seed.fused_ops) - have)


def write_seeds(out: Path, registry=None) -> tuple[dict[str, Path], dict[str, str]]:
    """Converts every seed whose ops are registered into out/<name>.mrt. Returns
    (written: name -> path, skipped: name -> reason)."""
    from minibuild import registry as registry_mod
    from minibuild.testing import convert_model
    registry = registry or registry_mod.load()
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = {}, {}
    for seed in SEEDS:
        missing = missing_ops(seed, registry)
        if missing:
            skipped[seed.name] = "not in the registry yet: " + ", ".join(missing)
            continue
        model, feeds, constant = seed.build()
        data, runtime_inputs = convert_model(model, feeds, constant_inputs=constant, registry=registry)
        assert set(runtime_inputs) == set(feeds), (seed.name, runtime_inputs)
        path = out / f"{seed.name}.mrt"
        path.write_bytes(data)
        written[seed.name] = path
    return written, skipped


if __name__ == "__main__":
    done, skipped = write_seeds(Path(sys.argv[1]))
    for name, path in done.items():
        print(f"{name}: {path} ({path.stat().st_size} bytes)")
    for name, why in skipped.items():
        print(f"{name}: skipped, {why}")

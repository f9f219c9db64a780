"""Build-time graph rewrites. Everything the runtime would otherwise have to do
at load (folding, fusing, removing no-ops) happens here, once, so the manifest
computed afterwards is exactly what the runtime will be asked for."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from . import domains
from .errors import ModelError

# Ops whose value is not a function of their inputs: never folded.
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
_MINIBUILD = "ai.minibuild"


@dataclass
class Graph:
    """A mutable view of an ONNX graph: nodes in order, constants as numpy arrays."""

    model: onnx.ModelProto
    source: str
    nodes: list = field(default_factory=list)
    consts: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)    # ValueInfoProto of real (non-constant) inputs
    outputs: list = field(default_factory=list)   # ValueInfoProto
    value_info: dict = field(default_factory=dict)  # name -> (elem_type, shape tuple)
    opsets: dict = field(default_factory=dict)      # domain ("" for ai.onnx) -> version
    log: list = field(default_factory=list)         # what was rewritten, for the report

    _index: dict | None = None

    def touch(self):
        """Call after changing nodes' inputs or the node list: drops the use index."""
        self._index = None

    def _uses(self) -> dict:
        if self._index is None:
            idx = {}
            for n in self.nodes:
                for i in n.input:
                    if i:
                        idx.setdefault(i, []).append(n)
            self._index = idx
        return self._index

    def drop(self, node, note: str):
        """Remove a node the rewrite made redundant, and say so in the log."""
        self.nodes.remove(node)
        self.touch()
        self.log.append(note)

    def consumers(self, name: str) -> list:
        return list(self._uses().get(name, ()))

    def is_output(self, name: str) -> bool:
        return any(o.name == name for o in self.outputs)

    def producer(self, name: str):
        for n in self.nodes:
            if name in n.output:
                return n
        return None

    def to_model(self) -> onnx.ModelProto:
        inits = [numpy_helper.from_array(v, k) for k, v in sorted(self.consts.items()) if self._used(k)]
        vi = [helper.make_tensor_value_info(k, t, s) for k, (t, s) in sorted(self.value_info.items())]
        g = helper.make_graph(self.nodes, self.model.graph.name or "main", self.inputs, self.outputs,
                              initializer=inits, value_info=vi)
        opsets = [helper.make_opsetid(d, v) for d, v in sorted(self.opsets.items())]
        m = helper.make_model(g, opset_imports=opsets, producer_name="minibuild")
        m.ir_version = max(self.model.ir_version, 4)
        return m

    def _used(self, name: str) -> bool:
        return self.is_output(name) or name in self._uses()


def _shape_of(vi) -> tuple:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)


def from_model(model: onnx.ModelProto, source: str, fixed_dims: dict[str, int] | None = None,
               input_shapes: dict[str, tuple] | None = None) -> Graph:
    fixed_dims = fixed_dims or {}
    input_shapes = input_shapes or {}
    g = Graph(model=model, source=source)
    for op in model.opset_import:
        g.opsets[domains.proto(op.domain)] = op.version
    if "" not in g.opsets:
        g.opsets[""] = 1
    for init in model.graph.initializer:
        g.consts[init.name] = numpy_helper.to_array(init)
    for vi in model.graph.input:
        if vi.name in g.consts:
            continue  # IR < 4 lists initializers as inputs too: they are constants
        vi = onnx.ValueInfoProto.FromString(vi.SerializeToString())
        if vi.name in input_shapes:
            shape = input_shapes[vi.name]
            vi = helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(shape))
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                continue
            if d.dim_param and d.dim_param in fixed_dims:
                size = fixed_dims[d.dim_param]
                d.Clear()
                d.dim_value = size
                continue
            what = f"dimension '{d.dim_param}'" if d.dim_param else "an unnamed dynamic dimension"
            fix = (f"--fix-dim {d.dim_param}=N" if d.dim_param else
                   f"--input-shape {vi.name}=" + ",".join(str(x.dim_value or 'N') for x in vi.type.tensor_type.shape.dim))
            raise ModelError(
                f"{source}: input '{vi.name}' has {what} at axis {i}; minirt fixes shapes at build time. "
                f"Give it a size with {fix}"
            )
        if not vi.type.tensor_type.HasField("shape"):
            raise ModelError(f"{source}: input '{vi.name}' has no shape; give one with --input-shape {vi.name}=D0,D1,...")
        g.inputs.append(vi)
    g.outputs = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in model.graph.output]
    for i, n in enumerate(model.graph.node):
        n = onnx.NodeProto.FromString(n.SerializeToString())
        if not n.name:
            n.name = f"{n.op_type}_{i}"
        n.domain = domains.proto(n.domain)
        g.nodes.append(n)
    return g


# --- constant folding -------------------------------------------------------------

def _eval_node(g: Graph, node) -> list[np.ndarray]:
    feeds = {name: g.consts[name] for name in node.input if name}
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
    model = helper.make_model(helper.make_graph([node], "fold", ins, outs),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in g.opsets.items()])
    return ReferenceEvaluator(model).run(None, feeds)


def fold_constants(g: Graph) -> bool:
    changed = False
    kept = []
    for node in g.nodes:
        foldable = (
            node.domain == "" and node.op_type not in _NONDETERMINISTIC
            and all((not i) or i in g.consts for i in node.input)
            and not any(g.is_output(o) for o in node.output)
        )
        if node.op_type == "Shape" and node.input[0] in g.value_info and not any(g.is_output(o) for o in node.output):
            shape = g.value_info[node.input[0]][1]
            if shape is not None and all(isinstance(d, int) for d in shape):
                start = next((a.i for a in node.attribute if a.name == "start"), 0)
                end = next((a.i for a in node.attribute if a.name == "end"), None)
                g.consts[node.output[0]] = np.array(shape[start:end], dtype=np.int64)
                g.log.append(f"folded Shape {node.name}")
                changed = True
                continue
        if foldable:
            try:
                values = _eval_node(g, node)
            except Exception as e:  # the reference evaluator cannot run it: keep the node
                g.log.append(f"could not fold {node.op_type} {node.name}: {e}")
                kept.append(node)
                continue
            for name, value in zip([o for o in node.output if o], values):
                g.consts[name] = np.asarray(value)
            g.log.append(f"folded {node.op_type} {node.name}")
            changed = True
            continue
        kept.append(node)
    g.nodes = kept
    g.touch()
    return changed


# --- no-op removal ---------------------------------------------------------------

def _replace_uses(g: Graph, old: str, new: str):
    for n in g.consumers(old):
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
    g.touch()


def _is_noop(g: Graph, node) -> bool:
    if node.op_type == "Identity":
        return True
    if node.op_type == "Dropout":
        # Inference: Dropout is the identity unless its mask is used or training_mode is set.
        mask_used = any(o and (g.consumers(o) or g.is_output(o)) for o in node.output[1:])
        return not mask_used and len(node.input) < 3
    if node.op_type == "Sum" and len(node.input) == 1:
        return True
    return False


def remove_noops(g: Graph) -> bool:
    changed = False
    for node in list(g.nodes):
        if node.domain != "" or not _is_noop(g, node):
            continue
        src, dst = node.input[0], node.output[0]
        if g.is_output(dst):
            prod = g.producer(src)
            if prod is None or g.is_output(src) or src in g.consts:
                continue  # input or constant straight to output: the node must stay
            prod.output[list(prod.output).index(src)] = dst
            _replace_uses(g, src, dst)
            if src in g.value_info:
                g.value_info[dst] = g.value_info[src]
        else:
            _replace_uses(g, dst, src)
        g.drop(node, f"removed {node.op_type} {node.name}")
        changed = True
    return changed


def remove_dead(g: Graph) -> bool:
    """Drop nodes none of whose outputs is used (after folding and rewiring)."""
    changed = False
    for node in reversed(list(g.nodes)):
        if not any(o and (g.is_output(o) or g.consumers(o)) for o in node.output):
            g.drop(node, f"removed unused {node.op_type} {node.name}")
            changed = True
    return changed


def sum_to_add(g: Graph) -> bool:
    """Sum of 2+ inputs -> a chain of Add, so models that also use Add need one kernel, not two."""
    if g.opsets[""] < 8:
        return False  # Sum-6 has no broadcasting but Add-6 needs `broadcast`: keep Sum
    changed = False
    out = []
    for node in g.nodes:
        if node.domain == "" and node.op_type == "Sum" and len(node.input) >= 2:
            acc = node.input[0]
            for k, name in enumerate(node.input[1:]):
                last = k == len(node.input) - 2
                res = node.output[0] if last else f"{node.output[0]}__sum{k}"
                out.append(helper.make_node("Add", [acc, name], [res], name=f"{node.name}" if last else f"{node.name}__add{k}"))
                acc = res
            g.log.append(f"rewrote Sum {node.name} as Add")
            changed = True
        else:
            out.append(node)
    g.nodes = out
    g.touch()
    return changed


# --- fusions ------------------------------------------------------------------------

def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _single_consumer(g: Graph, name: str):
    cons = g.consumers(name)
    if len(cons) != 1 or g.is_output(name):
        return None
    return cons[0]


def fold_batchnorm(g: Graph) -> bool:
    """Conv -> BatchNormalization (inference) becomes one Conv with scaled weights."""
    changed = False
    for conv in list(g.nodes):
        if conv.op_type != "Conv" or conv.domain != "" or conv.input[1] not in g.consts:
            continue
        if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in g.consts:
            continue
        bn = _single_consumer(g, conv.output[0])
        if bn is None or bn.op_type != "BatchNormalization" or len([o for o in bn.output if o]) != 1:
            continue
        if not all(i in g.consts for i in bn.input[1:5]) or _attr(bn, "training_mode", 0):
            continue
        if _attr(bn, "spatial", 1) != 1:
            continue
        scale, bias, mean, var = (g.consts[i].astype(np.float64) for i in bn.input[1:5])
        eps = _attr(bn, "epsilon", 1e-5)
        w = g.consts[conv.input[1]].astype(np.float64)
        b = g.consts[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
        k = scale / np.sqrt(var + eps)
        w_name, b_name = f"{conv.output[0]}__bnw", f"{conv.output[0]}__bnb"
        g.consts[w_name] = (w * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        g.consts[b_name] = ((b - mean) * k + bias).astype(np.float32)
        while len(conv.input) < 3:
            conv.input.append("")
        conv.input[1], conv.input[2] = w_name, b_name
        old_out = conv.output[0]
        conv.output[0] = bn.output[0]
        g.value_info.pop(old_out, None)
        g.drop(bn, f"folded BatchNormalization {bn.name} into Conv {conv.name}")
        changed = True
    return changed


def _channel_vector(value: np.ndarray, out_shape, channels: int):
    """`value` as a length-`channels` vector if broadcasting it against `out_shape`
    (N, C, ...) varies only along axis 1; else None."""
    if out_shape is None or value.ndim > len(out_shape):
        return None
    shape = (1,) * (len(out_shape) - value.ndim) + tuple(value.shape)
    for axis, d in enumerate(shape):
        if d != 1 and axis != 1:
            return None
    if shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1) if value.size > 1 else value.reshape(1), (channels,)).astype(np.float64)


def fold_affine(g: Graph) -> bool:
    """Conv or BatchNormalization followed by a per-channel constant Mul or Add
    (the scale/bias pairs older converters emit) becomes one node: the constants
    go into the weights and bias."""
    changed = False
    for node in list(g.nodes):
        if node not in g.nodes or node.domain != "" or node.op_type not in ("Conv", "BatchNormalization"):
            continue
        if node.op_type == "Conv" and (node.input[1] not in g.consts or (len(node.input) > 2 and node.input[2] and node.input[2] not in g.consts)):
            continue
        if node.op_type == "BatchNormalization" and (not all(i in g.consts for i in node.input[1:5]) or len([o for o in node.output if o]) != 1):
            continue
        nxt = _single_consumer(g, node.output[0])
        if nxt is None or nxt.domain != "" or nxt.op_type not in ("Mul", "Add") or len(nxt.input) != 2:
            continue
        other = nxt.input[1] if nxt.input[0] == node.output[0] else nxt.input[0]
        if other not in g.consts or other == node.output[0]:
            continue
        out_shape = g.value_info.get(node.output[0], (0, None))[1]
        c = (g.consts[node.input[1]].shape[0] if node.op_type == "Conv" else g.consts[node.input[1]].shape[0])
        vec = _channel_vector(g.consts[other], out_shape, c)
        if vec is None or g.value_info.get(nxt.output[0], (0, None))[1] != out_shape:
            continue
        tag = f"{nxt.output[0]}__{nxt.op_type.lower()}"
        if node.op_type == "Conv":
            w = g.consts[node.input[1]].astype(np.float64)
            b = g.consts[node.input[2]].astype(np.float64) if len(node.input) > 2 and node.input[2] else np.zeros(c)
            if nxt.op_type == "Mul":
                w = w * vec.reshape(-1, *([1] * (w.ndim - 1)))
                b = b * vec
            else:
                b = b + vec
            g.consts[tag + "_w"], g.consts[tag + "_b"] = w.astype(np.float32), b.astype(np.float32)
            while len(node.input) < 3:
                node.input.append("")
            node.input[1], node.input[2] = tag + "_w", tag + "_b"
        else:
            scale, bias = g.consts[node.input[1]].astype(np.float64), g.consts[node.input[2]].astype(np.float64)
            if nxt.op_type == "Mul":
                scale, bias = scale * vec, bias * vec
            else:
                bias = bias + vec
            g.consts[tag + "_s"], g.consts[tag + "_b"] = scale.astype(np.float32), bias.astype(np.float32)
            node.input[1], node.input[2] = tag + "_s", tag + "_b"
        g.value_info.pop(node.output[0], None)
        node.output[0] = nxt.output[0]
        g.drop(nxt, f"folded {nxt.op_type} {nxt.name} into {node.op_type} {node.name}")
        changed = True
    return changed


def _activation(g: Graph, node):
    """(name, params) if `node` is an activation the fused kernels implement."""
    if node.domain != "":
        return None
    if node.op_type == "Relu":
        return ("Relu", [])
    if node.op_type == "Clip":
        if g.opsets[""] < 11:
            return ("Clip", [float(_attr(node, "min", -3.4028234663852886e38)), float(_attr(node, "max", 3.4028234663852886e38))])
        lo = node.input[1] if len(node.input) > 1 else ""
        hi = node.input[2] if len(node.input) > 2 else ""
        if (lo and lo not in g.consts) or (hi and hi not in g.consts):
            return None
        return ("Clip", [float(g.consts[lo]) if lo else -3.4028234663852886e38,
                         float(g.consts[hi]) if hi else 3.4028234663852886e38])
    return None


def fuse_activations(g: Graph, available: set[tuple[str, str]]) -> bool:
    """Conv/Gemm followed by Relu/Clip -> FusedConv/FusedGemm (ai.minibuild), when the build has them."""
    changed = False
    for base in list(g.nodes):
        if base.domain != "" or base.op_type not in ("Conv", "Gemm"):
            continue
        fused_op = "Fused" + base.op_type
        if (_MINIBUILD, fused_op) not in available:
            continue
        act = _single_consumer(g, base.output[0])
        spec = _activation(g, act) if act is not None else None
        if spec is None:
            continue
        fused = helper.make_node(fused_op, list(base.input), [act.output[0]], name=base.name, domain=_MINIBUILD)
        fused.attribute.extend(base.attribute)
        fused.attribute.append(helper.make_attribute("activation", spec[0]))
        if spec[1]:
            fused.attribute.append(helper.make_attribute("activation_params", spec[1]))
        g.nodes[g.nodes.index(base)] = fused
        g.value_info.pop(base.output[0], None)
        g.drop(act, f"fused {base.op_type} {base.name} + {act.op_type} {act.name} into {fused_op}")
        changed = True
    if changed:
        g.opsets.setdefault(_MINIBUILD, 1)
    return changed


# --- shapes ---------------------------------------------------------------------------

def infer_shapes(g: Graph):
    """Static shapes for every value; fails naming the first value left without one.
    Only small constants (shape-like values) travel as data; weights travel as
    typed inputs, which is all shape inference needs and saves copying megabytes."""
    small = {k: v for k, v in g.consts.items() if v.size <= 64}
    big = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in sorted(g.consts.items()) if v.size > 64 and g._used(k)]
    graph = helper.make_graph(g.nodes, "infer", list(g.inputs) + big, g.outputs,
                              initializer=[numpy_helper.from_array(v, k) for k, v in sorted(small.items()) if g._used(k)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(g.opsets.items())])
    model.ir_version = max(g.model.ir_version, 4)
    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{g.source}: shape inference failed: {e}") from None
    vi = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        vi[v.name] = (v.type.tensor_type.elem_type, _shape_of(v))
    for name, arr in g.consts.items():
        vi[name] = (helper.np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
    g.value_info = vi


def since_version(g: Graph, node) -> int:
    if node.domain == _MINIBUILD:
        return 1
    try:
        return onnx.defs.get_schema(node.op_type, g.opsets.get(node.domain, 1), node.domain).since_version
    except onnx.defs.SchemaError:
        return g.opsets.get(node.domain, 1)


def check_static(g: Graph):
    for node in g.nodes:
        for name in list(node.input) + list(node.output):
            if not name or name in g.consts:
                continue
            info = g.value_info.get(name)
            if info is None or info[1] is None or not all(isinstance(d, int) and d >= 0 for d in info[1]):
                raise ModelError(
                    f"{g.source}: node '{node.name}' ({node.op_type}): value '{name}' has no static shape "
                    f"({info[1] if info else 'unknown'}) after shape inference; fix the model's input sizes "
                    "with --fix-dim NAME=N or --input-shape INPUT=D0,D1,..."
                )


def optimize(g: Graph, available: set[tuple[str, str]]) -> Graph:
    """Run every rewrite to a fixed point; shapes are inferred before fusing (onnx
    cannot infer shapes through ai.minibuild ops) and kept through it."""
    for _ in range(32):
        infer_shapes(g)
        changed = fold_constants(g)
        changed |= remove_noops(g)
        changed |= remove_dead(g)
        if not changed:
            break
    sum_to_add(g)
    infer_shapes(g)
    fold_batchnorm(g)
    while fold_affine(g):
        pass
    fuse_activations(g, available)
    check_static(g)
    return g

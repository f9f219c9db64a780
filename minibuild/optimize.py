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
    origins: dict = field(default_factory=dict)     # node name -> [(rewrite, original "Op name"), ...]: what
                                                    # each rewritten node stands for (the manifest's provenance)
    versions: dict = field(default_factory=dict)    # node name -> since_version, for nodes a rewrite made
                                                    # from a newer opset than the model imports (Gelu 20)

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

    def absorb(self, node_name: str, rewrite: str, originals: list) -> None:
        """Record that `node_name` now also does the work of `originals` (nodes, which
        may themselves have absorbed others): provenance for `minibuild query why`."""
        record = self.origins.setdefault(node_name, [])
        for n in originals:
            if n.name == node_name and record:
                continue  # already stands for itself and what it absorbed before
            record.append((rewrite, f"{n.op_type} {n.name}"))
            if n.name != node_name:
                record.extend(r for r in self.origins.pop(n.name, []) if r not in record)

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


def _to_array(tensor, source: str) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:  # data that does not fit the dims or type (a corrupt file)
        kind = dict((v, k) for k, v in onnx.TensorProto.DataType.items()).get(tensor.data_type, tensor.data_type)
        raise ModelError(f"{source}: initializer '{tensor.name}' ({kind} {list(tensor.dims)}) cannot be read: {e}") from None


def normalise(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """The model in the form the rewrites expect: an ai.onnx opset this onnx knows
    (every one from 1 up to onnx.defs.onnx_opset_version(); 7 and up is what
    exporters write), and model-local functions (which older torch exporters write
    for modules) inlined, so every node is a plain operator that shape inference
    and the registry know."""
    newest = onnx.defs.onnx_opset_version()
    for op in model.opset_import:
        if domains.proto(op.domain) == "" and not 1 <= op.version <= newest:
            raise ModelError(
                f"{source}: imports ai.onnx opset {op.version}, but the installed onnx {onnx.__version__} knows "
                f"opsets 1 to {newest}; upgrade onnx (pip install -U onnx) or export the model at opset {newest} or lower")
    if len(model.functions):
        try:
            from onnx import inliner
            model = inliner.inline_local_functions(model)
        except Exception as e:
            raise ModelError(f"{source}: cannot inline the model's local functions "
                             f"({', '.join(f.name for f in model.functions)}): {e}") from None
    return model


def from_model(model: onnx.ModelProto, source: str, fixed_dims: dict[str, int] | None = None,
               input_shapes: dict[str, tuple] | None = None) -> Graph:
    fixed_dims = fixed_dims or {}
    input_shapes = input_shapes or {}
    model = normalise(model, source)
    g = Graph(model=model, source=source)
    for op in model.opset_import:
        g.opsets[domains.proto(op.domain)] = op.version
    if "" not in g.opsets:
        g.opsets[""] = 1
    for init in model.graph.initializer:
        g.consts[init.name] = _to_array(init, source)
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

def _gather_elements(node, data, indices):
    axis = _attr(node, "axis", 0)
    return [np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis)]


# Folded with numpy, not onnx's reference evaluator: its GatherElements goes through
# np.choose, which takes at most 64 choices, so the position / token-type id gathers
# exporters write over a 128-long buffer (BERT's embeddings) would not fold.
_NUMPY_FOLDS = {"GatherElements": _gather_elements}


def _eval_node(g: Graph, node) -> list[np.ndarray]:
    if node.op_type in _NUMPY_FOLDS:
        return _NUMPY_FOLDS[node.op_type](node, *(g.consts[name] for name in node.input))
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
    if node.op_type == "Cast" and node.input[0] in g.value_info:
        # A cast to the type the value has already (wav2vec2's positional-conv output).
        return g.value_info[node.input[0]][0] == _attr(node, "to")
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
                g.absorb(out[-1].name, "Sum as a chain of Add", [node])
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
        if w.ndim < 1 or any(v.shape != (w.shape[0],) for v in (b, scale, bias, mean, var)):
            continue  # not one value per output channel: an invalid model, left for the kernels to refuse
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
        g.absorb(conv.name, "BatchNormalization folded into Conv", [conv, bn])
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
        if g.consts[node.input[1]].ndim < 1:
            continue  # an invalid model (scalar weights or scale), left for the kernels to refuse
        c = (g.consts[node.input[1]].shape[0] if node.op_type == "Conv" else g.consts[node.input[1]].shape[0])
        if any(g.consts[i].shape != (c,) for i in (node.input[2:3] if node.op_type == "Conv" else node.input[1:3]) if i):
            continue
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
        g.absorb(node.name, f"{nxt.op_type} folded into {node.op_type}", [node, nxt])
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
        if (lo and g.consts[lo].size != 1) or (hi and g.consts[hi].size != 1):
            return None  # Clip's bounds are scalars: anything else is left for the kernel to refuse
        return ("Clip", [float(g.consts[lo].reshape(())) if lo else -3.4028234663852886e38,
                         float(g.consts[hi].reshape(())) if hi else 3.4028234663852886e38])
    return None


# FusedConv's activations are clamps (and LeakyRelu); FusedConvAct's run vmath's
# array functions: two ops, so a build that only clamps carries none of that code.
_CONV_ACT_OP = {"Relu": "FusedConv", "Clip": "FusedConv", "LeakyRelu": "FusedConv",
                "Sigmoid": "FusedConvAct", "SiLU": "FusedConvAct", "HardSwish": "FusedConvAct"}


def _conv_activation(g: Graph, node):
    """(name, params) if `node` is an activation FusedConv / FusedConvAct implement:
    those of `_activation`, LeakyRelu, Sigmoid, HardSwish and ai.minibuild's SiLU."""
    if node.domain == _MINIBUILD and node.op_type == "SiLU":
        return ("SiLU", [])
    if node.domain != "":
        return None
    if node.op_type in ("Sigmoid", "HardSwish"):
        return (node.op_type, [])
    if node.op_type == "LeakyRelu":
        return ("LeakyRelu", [float(_attr(node, "alpha", 0.01))])
    return _activation(g, node)


def fuse_conv_epilogue(g: Graph, available: set[tuple[str, str]]) -> bool:
    """Conv -> Add (a residual of the same shape) [-> activation] and Conv -> activation
    (Relu, Clip, LeakyRelu: FusedConv; Sigmoid, HardSwish, SiLU: FusedConvAct, both
    ai.minibuild) -> one node, when every intermediate value is used only inside the
    pattern. The residual becomes input 3 (attribute residual = 1), added before the
    activation as the graph does; the fused node takes the last node's place (the
    residual may be computed after the Conv) and the Conv's name."""
    changed = False
    for conv in list(g.nodes):
        if conv not in g.nodes or conv.domain != "" or conv.op_type != "Conv" or not _is_f32(g, conv.output[0]):
            continue
        out, nodes, residual = conv.output[0], [conv], None
        nxt = _single_consumer(g, out)
        if nxt is not None and nxt.domain == "" and nxt.op_type == "Add" and (_MINIBUILD, "FusedConv") in available:
            other = _other(nxt, out)
            shape = g.value_info.get(out, (0, None))[1]
            if (other is not None and other != out and shape is not None and _is_f32(g, other)
                    and g.value_info.get(other, (0, None))[1] == shape
                    and g.value_info.get(nxt.output[0], (0, None))[1] == shape):
                residual, out = other, nxt.output[0]
                nodes.append(nxt)
                nxt = _single_consumer(g, out)
        spec = _conv_activation(g, nxt) if nxt is not None else None
        op = _CONV_ACT_OP[spec[0]] if spec is not None else "FusedConv"
        if spec is not None and (_MINIBUILD, op) in available:
            nodes.append(nxt)
            out = nxt.output[0]
        else:
            spec, op = None, "FusedConv"
        if len(nodes) == 1:
            continue
        inputs = list(conv.input) + [""] * (3 - len(conv.input))
        if residual is not None:
            inputs.append(residual)
        while inputs and not inputs[-1]:
            inputs.pop()
        fused = helper.make_node(op, inputs, [out], name=conv.name, domain=_MINIBUILD)
        fused.attribute.extend(conv.attribute)
        if spec is not None:
            fused.attribute.append(helper.make_attribute("activation", spec[0]))
            if spec[1]:
                fused.attribute.append(helper.make_attribute("activation_params", spec[1]))
        if residual is not None:
            fused.attribute.append(helper.make_attribute("residual", 1))
        for n in nodes[:-1]:
            g.value_info.pop(n.output[0], None)
        g.nodes[g.nodes.index(nodes[-1])] = fused
        for n in nodes[:-1]:
            g.nodes.remove(n)
        g.touch()
        g.absorb(fused.name, f"{' + '.join(n.op_type for n in nodes)} fused into {op}", nodes)
        g.log.append(f"fused {' + '.join(f'{n.op_type} {n.name}' for n in nodes)} into {op}")
        changed = True
    if changed:
        g.opsets.setdefault(_MINIBUILD, 1)
    return changed


# A ScaledConv multiplies W's floats (M x K) each run instead of X (C x H x W):
# fused where the weights are this many times smaller, or more (EfficientNet-B0's
# squeeze-excitations from 112 x 112 down to 28 x 28: 784 to 20 times; its 14 x 14
# ones, 2.5 times, keep the Mul).
_SCALE_FUSE_RATIO = 8


def fuse_conv_input_scale(g: Graph, available: set[tuple[str, str]]) -> bool:
    """Mul(X, S) -> Conv or FusedConv without an activation (X of shape N x C x ...,
    S one value per channel computed at run time: a squeeze-excitation's gate) ->
    ScaledConv (ai.minibuild), when the Mul's output feeds only that convolution's X,
    the convolution has one group and constant weights far smaller than X
    (_SCALE_FUSE_RATIO). The convolution's residual, if any, follows S."""
    if (_MINIBUILD, "ScaledConv") not in available:
        return False
    changed = False
    for mul in list(g.nodes):
        if mul not in g.nodes or mul.domain != "" or mul.op_type != "Mul" or not _is_f32(g, mul.output[0]):
            continue
        conv = _single_consumer(g, mul.output[0])
        if (conv is None or conv.op_type not in ("Conv", "FusedConv") or conv.domain not in ("", _MINIBUILD)
                or conv.input[0] != mul.output[0] or mul.output[0] in conv.input[1:]
                or _attr(conv, "group", 1) != 1 or _attr(conv, "activation") is not None
                or conv.input[1] not in g.consts):
            continue
        out_shape = g.value_info.get(mul.output[0], (0, None))[1]
        shapes = [g.value_info.get(i, (0, None))[1] for i in mul.input]
        if out_shape is None or any(s is None for s in shapes) or len(out_shape) < 3 or \
                not all(isinstance(d, int) and d > 0 for d in out_shape):
            continue
        big = [k for k in (0, 1) if tuple(shapes[k]) == tuple(out_shape)]
        if len(big) != 1:
            continue
        x, s = mul.input[big[0]], mul.input[1 - big[0]]
        ss, c = tuple(shapes[1 - big[0]]), out_shape[1]
        # S: one value per channel along axis 1 (1 x C x 1 x 1, or C x 1 x 1); a
        # constant S is the weights' business (fold_affine), not this rewrite's
        if (s in g.consts or not all(isinstance(d, int) for d in ss) or int(np.prod(ss)) != c
                or len(ss) < len(out_shape) - 1 or ss[len(ss) - len(out_shape) + 1] != c):
            continue
        w = g.consts[conv.input[1]]
        if w.ndim != len(out_shape) or w.shape[1] != c or w.size * _SCALE_FUSE_RATIO > int(np.prod(out_shape[1:])):
            continue
        residual = conv.input[3] if conv.op_type == "FusedConv" and _attr(conv, "residual", 0) == 1 else None
        inputs = [x, conv.input[1], conv.input[2] if len(conv.input) > 2 else "", s] + ([residual] if residual else [])
        fused = helper.make_node("ScaledConv", inputs, [conv.output[0]], name=conv.name, domain=_MINIBUILD)
        fused.attribute.extend(a for a in conv.attribute if a.name != "residual")
        if residual:
            fused.attribute.append(helper.make_attribute("residual", 1))
        g.value_info.pop(mul.output[0], None)
        g.nodes[g.nodes.index(conv)] = fused
        g.nodes.remove(mul)
        g.touch()
        g.absorb(fused.name, f"Mul + {conv.op_type} fused into ScaledConv", [conv, mul])
        g.log.append(f"fused Mul {mul.name} + {conv.op_type} {conv.name} into ScaledConv")
        changed = True
    if changed:
        g.opsets.setdefault(_MINIBUILD, 1)
    return changed


def fuse_activations(g: Graph, available: set[tuple[str, str]]) -> bool:
    """Conv/Gemm followed by Relu/Clip -> FusedConv/FusedGemm (ai.minibuild), when the build has them."""
    changed = False
    for base in list(g.nodes):
        if base.domain != "" or base.op_type not in ("Conv", "Gemm"):
            continue
        if base.op_type == "Conv" and (_MINIBUILD, "FusedConv") in available:
            continue  # fuse_conv_epilogue fused these
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
        g.absorb(fused.name, f"{base.op_type} + {act.op_type} fused into {fused_op}", [base, act])
        g.drop(act, f"fused {base.op_type} {base.name} + {act.op_type} {act.name} into {fused_op}")
        changed = True
    if changed:
        g.opsets.setdefault(_MINIBUILD, 1)
    return changed


# --- pattern fusions (SiLU, Gelu, LayerNormalization) ---------------------------------
# Exporters without these ops write them out of primitives. Each pass below matches
# one such pattern exactly (constants checked, every intermediate value used only
# inside the pattern) and replaces it with one node, named after the pattern's first
# node like FusedConv; the log names every node it replaced.

def _scalar(g: Graph, name: str):
    """The value of a one-element constant, else None."""
    v = g.consts.get(name)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


def _close(v, want: float, rtol: float = 1e-5) -> bool:
    return v is not None and abs(v - want) <= rtol * abs(want)


def _other(node, name: str):
    """The input of binary `node` that is not `name` (None if `name` is not an input)."""
    if len(node.input) != 2:
        return None
    a, b = node.input
    return b if a == name else a if b == name else None


def _sole_use(g: Graph, name: str, op: str):
    """The only consumer of `name`, if it is an ai.onnx `op` and `name` is not a graph output."""
    n = _single_consumer(g, name)
    return n if n is not None and n.domain == "" and n.op_type == op else None


def _is_f32(g: Graph, name: str) -> bool:
    return g.value_info.get(name, (0, None))[0] == onnx.TensorProto.FLOAT


def _replace_pattern(g: Graph, nodes: list, fused, since_version: int | None = None) -> None:
    """Put `fused` where the pattern's last node was (its inputs are all computed by
    then), drop the rest, and record the replaced nodes. `since_version` is the fused
    operator's version when it is newer than the model's opset import (the runtime
    is told it per node; shapes were inferred before fusing, so onnx never sees it)."""
    order = sorted(nodes, key=g.nodes.index)
    fused.name = order[0].name
    for n in order[:-1]:
        for o in n.output:
            g.value_info.pop(o, None)
    g.nodes[g.nodes.index(order[-1])] = fused
    for n in order[:-1]:
        g.nodes.remove(n)
    g.touch()
    if since_version is not None:
        g.versions[fused.name] = since_version
    op = f"{domains.canonical(fused.domain)}.{fused.op_type}" if fused.domain else fused.op_type
    g.absorb(fused.name, f"{' + '.join(dict.fromkeys(n.op_type for n in order))} fused into {op}", order)
    g.log.append(f"fused {' + '.join(f'{n.op_type} {n.name}' for n in order)} into {op} {fused.name}")


def fuse_silu(g: Graph, available: set[tuple[str, str]]) -> bool:
    """x * Sigmoid(x) (either operand order) -> SiLU (ai.minibuild)."""
    if (_MINIBUILD, "SiLU") not in available:
        return False
    changed = False
    for sig in list(g.nodes):
        if sig not in g.nodes or sig.domain != "" or sig.op_type != "Sigmoid" or not _is_f32(g, sig.input[0]):
            continue
        x = sig.input[0]
        mul = _sole_use(g, sig.output[0], "Mul")
        if mul is None or _other(mul, sig.output[0]) != x:
            continue
        _replace_pattern(g, [sig, mul], helper.make_node("SiLU", [x], [mul.output[0]], domain=_MINIBUILD))
        changed = True
    if changed:
        g.opsets.setdefault(_MINIBUILD, 1)
    return changed


def fuse_gelu(g: Graph, available: set[tuple[str, str]]) -> bool:
    """x * 0.5 * (1 + Erf(x / sqrt(2))) -> Gelu (ai.onnx opset 20), in the orders
    exporters write it: x / sqrt(2) or x * (1/sqrt(2)); the three factors x, 0.5 and
    (1 + erf) multiplied in any association and operand order.

    Older exports are where this pattern lives: the fused node gets Gelu's own
    version (20) whatever the model imports (Graph.versions)."""
    if ("ai.onnx", "Gelu") not in available:
        return False
    changed = False
    for erf in list(g.nodes):
        if erf not in g.nodes or erf.domain != "" or erf.op_type != "Erf":
            continue
        scaled = g.producer(erf.input[0])
        if scaled is None or scaled.domain != "" or _single_consumer(g, scaled.output[0]) is not erf:
            continue
        if scaled.op_type == "Div" and _close(_scalar(g, scaled.input[1]), 2 ** 0.5):
            x = scaled.input[0]
        elif scaled.op_type == "Mul" and len(scaled.input) == 2:
            x = next((a for a, b in (scaled.input, scaled.input[::-1]) if _close(_scalar(g, b), 0.5 ** 0.5)), None)
        else:
            continue
        if x is None or x in g.consts or not _is_f32(g, x):
            continue
        add = _sole_use(g, erf.output[0], "Add")
        if add is None or not _close(_scalar(g, _other(add, erf.output[0]) or ""), 1.0):
            continue
        t = add.output[0]
        m1 = _sole_use(g, t, "Mul")
        if m1 is None:
            continue
        u = _other(m1, t)
        pattern = None
        if u == x:                                   # (x * t) * 0.5
            m2 = _sole_use(g, m1.output[0], "Mul")
            if m2 is not None and _close(_scalar(g, _other(m2, m1.output[0]) or ""), 0.5):
                pattern = [scaled, erf, add, m1, m2]
        elif _close(_scalar(g, u or ""), 0.5):       # x * (t * 0.5)
            m2 = _sole_use(g, m1.output[0], "Mul")
            if m2 is not None and _other(m2, m1.output[0]) == x:
                pattern = [scaled, erf, add, m1, m2]
        else:                                        # (x * 0.5) * t
            half = g.producer(u) if u else None
            if (half is not None and half.domain == "" and half.op_type == "Mul"
                    and _single_consumer(g, u) is m1 and _other(half, x) is not None
                    and _close(_scalar(g, _other(half, x)), 0.5)):
                pattern = [half, scaled, erf, add, m1]
        if pattern is None:
            continue
        _replace_pattern(g, pattern, helper.make_node("Gelu", [x], [pattern[-1].output[0]]), since_version=20)
        changed = True
    return changed


def _reduce_axes(g: Graph, node):
    """The axes of a ReduceMean with keepdims=1, or None (absent axes reduce all)."""
    if _attr(node, "keepdims", 1) != 1 or _attr(node, "noop_with_empty_axes", 0):
        return None
    if len(node.input) > 1 and node.input[1]:
        v = g.consts.get(node.input[1])
        return None if v is None else [int(a) for a in v.reshape(-1)]
    axes = _attr(node, "axes")
    return None if axes is None else [int(a) for a in axes]


def fuse_layernorm(g: Graph, available: set[tuple[str, str]]) -> bool:
    """The LayerNormalization older exporters write out:
        m = ReduceMean(x, last axes); d = x - m; v = ReduceMean(Pow(d, 2), same axes)
        y = d / Sqrt(v + eps) [* gamma] [+ beta]
    -> LayerNormalization (ai.onnx opset 17), axis = first reduced axis, gamma and beta
    (constants varying only along the normalised axes) as Scale and B; the fused
    node is LayerNormalization-17 whatever the model imports (see fuse_gelu)."""
    if ("ai.onnx", "LayerNormalization") not in available:
        return False
    changed = False
    for mean in list(g.nodes):
        if mean not in g.nodes or mean.domain != "" or mean.op_type != "ReduceMean":
            continue
        x = mean.input[0]
        shape = g.value_info.get(x, (0, None))[1]
        axes = _reduce_axes(g, mean)
        if not _is_f32(g, x) or shape is None or not axes or x in g.consts:
            continue
        r = len(shape)
        k = len(axes)
        if sorted(a % r if -r <= a < r else -1 for a in axes) != list(range(r - k, r)):
            continue  # not exactly the last k axes
        sub_uses = g.consumers(mean.output[0])
        if len(sub_uses) != 1 or g.is_output(mean.output[0]):
            continue
        sub = sub_uses[0]
        if sub.domain != "" or sub.op_type != "Sub" or list(sub.input) != [x, mean.output[0]]:
            continue
        d = sub.output[0]
        uses = g.consumers(d)
        if len(uses) != 2 or g.is_output(d):
            continue
        pw = next((n for n in uses if n.domain == "" and n.op_type == "Pow" and n.input[0] == d), None)
        div = next((n for n in uses if n.domain == "" and n.op_type == "Div" and n.input[0] == d), None)
        if pw is None or div is None or not _close(_scalar(g, pw.input[1]), 2.0):
            continue
        var = _sole_use(g, pw.output[0], "ReduceMean")
        if var is None or _reduce_axes(g, var) is None or sorted(a % r for a in _reduce_axes(g, var)) != list(range(r - k, r)):
            continue
        add = _sole_use(g, var.output[0], "Add")
        eps = _scalar(g, _other(add, var.output[0]) or "") if add is not None else None
        if eps is None or eps < 0:
            continue
        sq = _sole_use(g, add.output[0], "Sqrt")
        if sq is None or _single_consumer(g, sq.output[0]) is not div or div.input[1] != sq.output[0]:
            continue
        pattern = [mean, sub, pw, var, add, sq, div]
        norm = tuple(int(s) for s in shape[r - k:])

        def affine(prev, op):
            """(node, constant broadcast to the normalised shape) if `prev`'s only use
            is `op` with a constant that varies only along the normalised axes."""
            n = _sole_use(g, prev.output[0], op)
            c = _other(n, prev.output[0]) if n is not None else None
            v = g.consts.get(c) if c else None
            if v is None or v.dtype != np.float32 or v.ndim > r:
                return None
            aligned = v.reshape((1,) * (r - v.ndim) + v.shape)
            if any(s != 1 for s in aligned.shape[:r - k]):
                return None
            try:
                return n, np.ascontiguousarray(np.broadcast_to(aligned.reshape(aligned.shape[r - k:]), norm))
            except ValueError:
                return None

        last = div
        scale = np.ones(norm, np.float32)
        bias = None
        found = affine(last, "Mul")
        if found:
            last, scale = found
            pattern.append(last)
        found = affine(last, "Add")
        if found:
            last, bias = found
            pattern.append(last)
        y = last.output[0]
        s_name, b_name = f"{y}__ln_scale", f"{y}__ln_bias"
        g.consts[s_name] = scale.astype(np.float32)
        inputs = [x, s_name]
        if bias is not None:
            g.consts[b_name] = bias.astype(np.float32)
            inputs.append(b_name)
        fused = helper.make_node("LayerNormalization", inputs, [y], axis=-k, epsilon=float(eps))
        _replace_pattern(g, pattern, fused, since_version=17)
        g.value_info[s_name] = (onnx.TensorProto.FLOAT, norm)
        if bias is not None:
            g.value_info[b_name] = (onnx.TensorProto.FLOAT, norm)
        changed = True
    return changed


# --- build-time QDQ lowering --------------------------------------------------------
# onnxruntime.quantization's QDQ form (and tf2onnx's) wraps every float op in
# DequantizeLinear inputs and a QuantizeLinear output. onnxruntime rewrites those
# groups into its quantised kernels when a session starts; here it happens at build
# time, so the manifest names exactly the int8 kernels that run. Each pattern is
# matched exactly (constant scales and zero points, the float value used only inside
# the group); a group that does not match stays float with its DQ/Q around it, and
# the log says which and why.

_MS = "com.microsoft"
_QTYPES = {onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8}
# (x, w, y) element types the QLinearConv / QLinearMatMul / QGemm kernels serve.
_QSIGS = {(np.uint8, np.int8, np.uint8), (np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8)}
_QCOPY = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"}


@dataclass
class _QParam:
    """A quantised value as a DQ node reads it or a Q node writes it."""
    node: object          # the DequantizeLinear / QuantizeLinear node
    q: str                # the int8/uint8 value
    scale: str            # its scale constant (name)
    zp: str               # its zero-point constant (name), made if the model omits it
    dtype: type           # np.uint8 / np.int8
    axis: int | None      # per-axis quantisation axis, None when per tensor


def _qparam(g: Graph, node) -> _QParam | None:
    """The Q/DQ node's parameters, if they are constants and its type int8/uint8."""
    if node is None or node.domain != "" or node.op_type not in ("DequantizeLinear", "QuantizeLinear"):
        return None
    if _attr(node, "block_size", 0) or len(node.input) < 2 or node.input[1] not in g.consts:
        return None
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    if zp and zp not in g.consts:
        return None
    scale = g.consts[node.input[1]]
    if scale.dtype != np.float32:
        return None
    if zp:
        dtype = g.consts[zp].dtype.type
    elif node.op_type == "DequantizeLinear":
        dtype = _QTYPES.get(g.value_info.get(node.input[0], (0, None))[0])
    else:
        out_t = _attr(node, "output_dtype", 0)
        dtype = _QTYPES.get(out_t) if out_t else np.uint8
    if dtype not in (np.uint8, np.int8, np.int32):
        return None
    if not zp:
        zp = f"{node.input[1]}__zp_{np.dtype(dtype).name}"
        g.consts.setdefault(zp, np.zeros((), dtype))
    if scale.size == 1 and g.consts[zp].size == 1:
        axis = None
    elif scale.ndim == 1 and g.consts[zp].shape == scale.shape:
        axis = _attr(node, "axis", 1)
    else:
        return None
    q = node.input[0] if node.op_type == "DequantizeLinear" else node.output[0]
    return _QParam(node, q, node.input[1], zp, dtype, axis)


def _dq_input(g: Graph, name: str) -> _QParam | None:
    p = _qparam(g, g.producer(name))
    return p if p is not None and p.node.op_type == "DequantizeLinear" and p.dtype in (np.uint8, np.int8) else None


def _scalar_param(g: Graph, p: _QParam) -> bool:
    return p.axis is None


def _q_output(g: Graph, name: str, range_ops: bool = True):
    """(Q params, [folded Relu/Clip nodes]) when `name` flows only into one
    QuantizeLinear, through at most one Relu/Clip whose clamp the output range
    already applies (Relu: the zero point is the type's minimum; Clip(a, b): the
    representable range lies inside [a, b] within half a step)."""
    nxt = _single_consumer(g, name)
    acts = []
    if nxt is not None and range_ops and nxt.domain == "" and nxt.op_type in ("Relu", "Clip"):
        acts = [nxt]
        nxt = _single_consumer(g, nxt.output[0])
    p = _qparam(g, nxt)
    if p is None or p.node.op_type != "QuantizeLinear" or p.dtype not in (np.uint8, np.int8) or not _scalar_param(g, p):
        return None, "its output does not go only into a per-tensor QuantizeLinear"
    if acts:
        spec = _activation(g, acts[0])
        if spec is None:
            return None, f"{acts[0].op_type} {acts[0].name} has non-constant bounds"
        lo, hi = (0.0, np.inf) if spec[0] == "Relu" else spec[1]
        s, z = float(g.consts[p.scale].reshape(())), int(g.consts[p.zp].reshape(()))
        info = np.iinfo(p.dtype)
        qlo, qhi = (info.min - z) * s, (info.max - z) * s
        if qlo < lo - 0.5 * s or qhi > hi + 0.5 * s:
            return None, (f"{acts[0].op_type} {acts[0].name} clamps inside the output's quantised range "
                          f"[{qlo:g}, {qhi:g}], so it cannot fold into it")
    return (p, acts), ""


def _same_qparams(g: Graph, a: _QParam, b: _QParam) -> bool:
    return (a.dtype == b.dtype and _scalar_param(g, a) and _scalar_param(g, b)
            and np.array_equal(g.consts[a.scale].reshape(-1), g.consts[b.scale].reshape(-1))
            and np.array_equal(g.consts[a.zp].reshape(-1), g.consts[b.zp].reshape(-1)))


def _lower_group(g: Graph, node, qop: str, domain: str, inputs: list, dqs: list, out: tuple, attrs=()):
    """Replace `node` (with its output Q and folded activations) by `qop` writing the Q's output."""
    qp, acts = out
    new = helper.make_node(qop, inputs, [qp.node.output[0]], name=node.name, domain=domain)
    new.attribute.extend(attrs)
    for n in [node] + acts:
        for o in n.output:
            g.value_info.pop(o, None)
    g.nodes[g.nodes.index(qp.node)] = new
    for n in [node] + acts:
        g.nodes.remove(n)
    g.touch()
    originals = [d.node for d in dqs] + [node] + acts + [qp.node]
    g.absorb(new.name, f"QDQ group lowered to {qop}", originals)
    g.log.append(f"lowered {' + '.join(f'{n.op_type} {n.name}' for n in originals)} into {qop} {new.name}")
    if domain == _MS:
        g.opsets.setdefault(_MS, 1)
    return new


def _weight_q(g: Graph, name: str, axis_ok) -> tuple[_QParam | None, str]:
    w = _dq_input(g, name)
    if w is None or w.q not in g.consts:
        return None, "its weight is not a DequantizeLinear of an int8/uint8 constant"
    if w.axis is not None and not axis_ok(w.axis % g.consts[w.q].ndim, g.consts[w.scale].size):
        return None, f"its weight is quantised along axis {w.axis}, which the kernel does not serve"
    return w, ""


def _bias_q(g: Graph, name: str, x: _QParam, w: _QParam, tag: str) -> str | None:
    """The int32 bias constant for accumulator scale sx * sw: the model's own when its
    DQ uses that scale (onnxruntime's quantiser writes it so), else the float bias
    (a float constant or a DQ of one) requantised to it."""
    sx = g.consts[x.scale].astype(np.float32).reshape(())
    sw = g.consts[w.scale].astype(np.float32).reshape(-1)
    want = (sx * sw).astype(np.float32)
    dq = _qparam(g, g.producer(name))
    if dq is not None and dq.node.op_type == "DequantizeLinear" and dq.dtype == np.int32 and dq.q in g.consts:
        s = g.consts[dq.scale].astype(np.float32).reshape(-1)
        if not np.any(g.consts[dq.zp]) and np.allclose(s, want, rtol=1e-6, atol=0):
            return dq.q
        value = (g.consts[dq.q].astype(np.float64) * s).reshape(-1)
    elif name in g.consts and g.consts[name].dtype == np.float32:
        value = g.consts[name].astype(np.float64).reshape(-1)
    else:
        return None
    q = np.clip(np.round(value / want.astype(np.float64)), -2**31, 2**31 - 1).astype(np.int32)
    g.consts[tag] = q
    return tag


def _lower_one(g: Graph, node, available) -> str:
    """Lower `node`'s QDQ group, or say why it stays float ("" when not a QDQ group)."""
    op = node.op_type
    ins = [i for i in node.input]
    if op in ("Conv", "MatMul", "Gemm"):
        x = _dq_input(g, ins[0]) if ins else None
        if x is None:
            return ""
        if not _scalar_param(g, x):
            return "its input is quantised per axis"
        qop, dom = {"Conv": ("QLinearConv", ""), "MatMul": ("QLinearMatMul", ""), "Gemm": ("QGemm", _MS)}[op]
        if (domains.canonical(dom), qop) not in available:
            return f"the registry has no {qop}"
        if op == "Conv":
            axis_ok = lambda a, n: a == 0
        elif op == "MatMul":
            axis_ok = lambda a, n: True  # checked below: 2-D, per column
        else:
            axis_ok = lambda a, n: a == (0 if _attr(node, "transB", 0) else 1)
        if len(ins) < 2:
            return "it has no weight"
        w, why = _weight_q(g, ins[1], axis_ok)
        if w is None:
            return why
        if op == "MatMul" and w.axis is not None and (g.consts[w.q].ndim != 2 or w.axis % 2 != 1):
            return "its weight is not 2-D quantised per column"
        out, why = _q_output(g, node.output[0])
        if out is None:
            return why
        if (x.dtype, w.dtype, out[0].dtype) not in _QSIGS:
            return f"no kernel for activations {np.dtype(x.dtype).name}, weights {np.dtype(w.dtype).name}"
        bias = ins[2] if len(ins) > 2 and ins[2] else ""
        attrs = [a for a in node.attribute]
        if op == "Gemm":
            if _attr(node, "alpha", 1.0) != 1.0 or (bias and _attr(node, "beta", 1.0) != 1.0):
                return "alpha or beta is not 1"
            attrs = [a for a in node.attribute if a.name in ("transA", "transB")]
        if bias:
            b = _bias_q(g, bias, x, w, f"{node.output[0]}__qbias")
            if b is None:
                return "its bias is neither a constant nor a DequantizeLinear of one"
            bias = b
        qp = out[0]
        if op == "Conv":
            inputs = [x.q, x.scale, x.zp, w.q, w.scale, w.zp, qp.scale, qp.zp] + ([bias] if bias else [])
        elif op == "MatMul":
            if bias:
                return "MatMul has no bias"
            inputs = [x.q, x.scale, x.zp, w.q, w.scale, w.zp, qp.scale, qp.zp]
        else:
            inputs = [x.q, x.scale, x.zp, w.q, w.scale, w.zp, bias, qp.scale, qp.zp]
        _lower_group(g, node, qop, dom, inputs, [x, w], out, attrs)
        return "lowered"
    if op in ("Add", "Mul"):
        a, b = (_dq_input(g, i) for i in ins[:2])
        if a is None and b is None:
            return ""
        if a is None or b is None or not _scalar_param(g, a) or not _scalar_param(g, b) or a.dtype != b.dtype:
            return "its inputs are not both per-tensor DequantizeLinear of one type"
        qop = "QLinear" + op
        if (_MS, qop) not in available:
            return f"the registry has no com.microsoft {qop}"
        out, why = _q_output(g, node.output[0], range_ops=True)
        if out is None:
            return why
        if out[0].dtype != a.dtype:
            return "its output type differs from its inputs'"
        qp = out[0]
        _lower_group(g, node, qop, _MS, [a.q, a.scale, a.zp, b.q, b.scale, b.zp, qp.scale, qp.zp], [a, b], out)
        return "lowered"
    if op == "GlobalAveragePool":
        x = _dq_input(g, ins[0])
        if x is None:
            return ""
        if (_MS, "QLinearGlobalAveragePool") not in available:
            return "the registry has no com.microsoft QLinearGlobalAveragePool"
        out, why = _q_output(g, node.output[0], range_ops=False)
        if out is None or not _scalar_param(g, x) or out[0].dtype != x.dtype:
            return why or "its input is per-axis or its output of another type"
        qp = out[0]
        _lower_group(g, node, "QLinearGlobalAveragePool", _MS, [x.q, x.scale, x.zp, qp.scale, qp.zp], [x], out)
        return "lowered"
    if op in ("AveragePool", "Sigmoid", "LeakyRelu"):
        x = _dq_input(g, ins[0]) if ins else None
        if x is None:
            return ""
        qop = "QLinear" + op
        if (_MS, qop) not in available:
            return f"the registry has no com.microsoft {qop}"
        if not _scalar_param(g, x):
            return "its input is quantised per axis"
        attrs = []
        if op == "AveragePool":
            if any(d != 1 for d in _attr(node, "dilations", [])):
                return "it has dilations, which QLinearAveragePool does not take"
            keep = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
            attrs = [a for a in node.attribute if a.name in keep]
        elif op == "LeakyRelu":
            attrs = [helper.make_attribute("alpha", float(_attr(node, "alpha", 0.01)))]
        out, why = _q_output(g, node.output[0], range_ops=False)
        if out is None:
            return why
        if out[0].dtype != x.dtype:
            return "its output type differs from its input's"
        qp = out[0]
        _lower_group(g, node, qop, _MS, [x.q, x.scale, x.zp, qp.scale, qp.zp], [x], out, attrs)
        return "lowered"
    if op == "Concat":
        xs = [_dq_input(g, i) if i else None for i in ins]
        if not any(xs):
            return ""
        if not all(xs) or not all(_scalar_param(g, x) for x in xs) or len({x.dtype for x in xs}) != 1:
            return "its inputs are not all per-tensor DequantizeLinear of one type"
        out, why = _q_output(g, node.output[0], range_ops=False)
        if out is None:
            return why
        qp = out[0]
        if qp.dtype != xs[0].dtype:
            return "its output type differs from its inputs'"
        axis = [helper.make_attribute("axis", int(_attr(node, "axis", 1 if since_version(g, node) < 4 else 0)))]
        if all(_same_qparams(g, x, qp) for x in xs) and ("ai.onnx", "Concat") in available:
            # Every piece already has the output's parameters: the Concat itself on the int8 values.
            new = helper.make_node("Concat", [x.q for x in xs], [qp.node.output[0]], name=node.name)
            new.attribute.extend(axis)
            g.value_info.pop(node.output[0], None)
            g.nodes[g.nodes.index(qp.node)] = new
            g.nodes.remove(node)
            g.touch()
            g.absorb(new.name, "QDQ pairs dropped around Concat (equal parameters: it runs on the int8 values)",
                     [x.node for x in xs] + [node, qp.node])
            g.log.append(f"Concat {node.name} runs on int8: its DequantizeLinear and QuantizeLinear "
                         f"{qp.node.name} share one scale and zero point")
            return "lowered"
        if (_MS, "QLinearConcat") not in available:
            return "the registry has no com.microsoft QLinearConcat"
        inputs = [qp.scale, qp.zp] + [n for x in xs for n in (x.q, x.scale, x.zp)]
        _lower_group(g, node, "QLinearConcat", _MS, inputs, xs, out, axis)
        return "lowered"
    # MaxPool picks one of its inputs in each window, and dequantising is increasing
    # (scale > 0): on the int8 value with the same parameters it is the same copy.
    max_pool = op == "MaxPool" and len([o for o in node.output if o]) == 1
    if op in _QCOPY or max_pool:
        x = _dq_input(g, ins[0])
        if x is None:
            return ""
        if max_pool and not np.all(g.consts[x.scale] > 0):
            return "its DequantizeLinear scale is not positive"
        out, why = _q_output(g, node.output[0], range_ops=False)
        if out is None:
            return why
        if not _same_qparams(g, x, out[0]):
            return "its QuantizeLinear has other parameters than its DequantizeLinear"
        # A copy: the op itself on the int8 value, its Q (same parameters) gone.
        qp = out[0]
        node.input[0] = x.q
        g.value_info.pop(node.output[0], None)
        old = node.output[0]
        node.output[0] = qp.node.output[0]
        g.nodes.remove(qp.node)
        g.touch()
        g.absorb(node.name, f"QDQ pair dropped around {op} (a copy: it runs on the int8 value)", [x.node, node, qp.node])
        g.log.append(f"{op} {node.name} runs on int8: dropped DequantizeLinear {x.node.name} and QuantizeLinear {qp.node.name} ({old})")
        return "lowered"
    if op in ("MaxPool", "Relu", "Clip", "Resize", "Softmax"):  # MaxPool: with Indices
        if any(_dq_input(g, i) for i in ins if i):
            return f"minirt has no quantised {op}"
    return ""


def fuse_dynamic_matmul(g: Graph, available: set[tuple[str, str]]) -> bool:
    """quantize_dynamic's DynamicQuantizeLinear(x) -> MatMulInteger(xq, B, xz, bz) -> Cast
    (float) -> Mul by Mul(x_scale, b_scale) (-> Add of an [N] bias) -> one com.microsoft
    DynamicQuantizeMatMul(x, B, b_scale, bz, bias), B a constant 2-D int8/uint8 matrix.
    The DynamicQuantizeLinear goes once every chain reading it is fused."""
    if (_MS, "DynamicQuantizeMatMul") not in available:
        return False
    changed = False
    for dql in [n for n in g.nodes if n.domain == "" and n.op_type == "DynamicQuantizeLinear"]:
        if len(dql.output) != 3 or not _is_f32(g, dql.input[0]):
            continue
        xq, xs, xz = dql.output
        for mm in g.consumers(xq):
            if (mm.domain != "" or mm.op_type != "MatMulInteger" or len(mm.input) < 3 or list(mm.input[:1]) != [xq]
                    or mm.input[2] != xz):
                continue
            b = g.consts.get(mm.input[1])
            zb = mm.input[3] if len(mm.input) > 3 else ""
            if b is None or b.ndim != 2 or b.dtype not in (np.int8, np.uint8) or (zb and zb not in g.consts):
                continue
            n = b.shape[1]
            if zb and (g.consts[zb].dtype != b.dtype or g.consts[zb].size not in (1, n)):
                continue
            cast = _sole_use(g, mm.output[0], "Cast")
            if cast is None or _attr(cast, "to") != onnx.TensorProto.FLOAT:
                continue
            mul = _sole_use(g, cast.output[0], "Mul")
            sm = _other(mul, cast.output[0]) if mul is not None else None
            smul = g.producer(sm) if sm else None
            if smul is None or smul.domain != "" or smul.op_type != "Mul" or _other(smul, xs) is None:
                continue
            ws = _other(smul, xs)
            if (ws not in g.consts or g.consts[ws].dtype != np.float32 or g.consts[ws].size not in (1, n)
                    or g.consts[ws].ndim > 1 or len(g.consumers(smul.output[0])) != 1 or g.is_output(smul.output[0])):
                continue
            chain = [mm, cast, smul, mul]
            bias = ""
            add = _sole_use(g, mul.output[0], "Add")
            if add is not None:
                c = _other(add, mul.output[0])
                v = g.consts.get(c)
                if v is not None and v.dtype == np.float32 and v.shape == (n,):
                    bias = c
                    chain.append(add)
            out = chain[-1].output[0]
            y_shape = g.value_info.get(out, (0, None))[1]
            if y_shape is None or tuple(y_shape[-1:]) != (n,):
                continue  # a bias that broadcasts wider than [.., N]
            fused = helper.make_node("DynamicQuantizeMatMul", [dql.input[0], mm.input[1], ws, zb, bias], [out],
                                     domain=_MS)
            while fused.input and not fused.input[-1]:
                del fused.input[-1]
            g.opsets.setdefault(_MS, 1)
            _replace_pattern(g, chain, fused)
            g.absorb(fused.name, "DynamicQuantizeLinear read by the fused DynamicQuantizeMatMul", [dql])
            changed = True
        if dql in g.nodes and not any(g.consumers(o) or g.is_output(o) for o in dql.output):
            g.drop(dql, f"dropped DynamicQuantizeLinear {dql.name}: every MatMulInteger reading it was fused")
    return changed


def fuse_matmul_bias(g: Graph, available: set[tuple[str, str]]) -> bool:
    """MatMul -> Add of a constant bias over the last axis ([N], or [1, .., N] no wider
    than the product) [-> Relu / Clip] -> ai.minibuild.FusedMatMul(A, B, bias): the
    bias (and the clamp) applied by the GEMM's tiles as they are stored, instead of a
    pass over the product per op. Transformer exports write every linear layer so.
    With Gelu after the Add (a feed-forward intermediate; fuse_gelu has run) it is
    ai.minibuild.FusedMatMulAct, whose GEMM applies Gelu to each block of the product
    while the block is in cache (its own op: FusedMatMul builds carry no vmath code)."""
    if (_MINIBUILD, "FusedMatMul") not in available:
        return False
    changed = False
    for mm in [n for n in g.nodes if n.domain == "" and n.op_type == "MatMul"]:
        y = g.value_info.get(mm.output[0], (0, None))
        if y[0] != onnx.TensorProto.FLOAT or not y[1] or any(not isinstance(d, int) for d in y[1]):
            continue
        add = _sole_use(g, mm.output[0], "Add")
        c = _other(add, mm.output[0]) if add is not None else None
        v = g.consts.get(c) if c else None
        n = y[1][-1]
        if (v is None or v.dtype != np.float32 or v.ndim < 1 or v.ndim > len(y[1]) or v.shape[-1] != n
                or v.size != n or g.value_info.get(add.output[0], (0, None))[1] != y[1]):
            continue
        chain = [mm, add]
        act = _single_consumer(g, add.output[0])
        spec = _activation(g, act) if act is not None else None
        op, approximate = "FusedMatMul", None
        if spec is None and act is not None and act.domain == "" and act.op_type == "Gelu":
            approximate = _attr(act, "approximate", b"none")
            approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
            if (_MINIBUILD, "FusedMatMulAct") in available and approximate in ("none", "tanh"):
                op, spec = "FusedMatMulAct", ("Gelu", [])
        if spec is not None:
            chain.append(act)
        fused = helper.make_node(op, [mm.input[0], mm.input[1], c], [chain[-1].output[0]],
                                 domain=_MINIBUILD)
        if op == "FusedMatMulAct":
            fused.attribute.append(helper.make_attribute("approximate", approximate))
        if spec is not None:
            fused.attribute.append(helper.make_attribute("activation", spec[0]))
            if spec[1]:
                fused.attribute.append(helper.make_attribute("activation_params", spec[1]))
        g.opsets.setdefault(_MINIBUILD, 1)
        _replace_pattern(g, chain, fused)
        changed = True
    return changed


def lower_qdq(g: Graph, available: set[tuple[str, str]]) -> bool:
    """DQ -> op -> Q groups -> quantised kernels (QLinearConv, QLinearMatMul, QGemm,
    QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat,
    QLinearSigmoid, QLinearLeakyRelu; copies, and a Concat of equal parameters, on int8 directly).
    Runs before constant folding, which would otherwise fold the weights' DQ to float."""
    if not any(n.op_type == "DequantizeLinear" and n.domain == "" for n in g.nodes):
        return False
    infer_shapes(g)
    changed = False
    for node in list(g.nodes):
        if node not in g.nodes or node.domain != "":
            continue
        try:
            why = _lower_one(g, node, available)
        except (KeyError, ValueError, TypeError, IndexError) as e:  # a malformed group: leave it float
            why = f"its parameters cannot be read ({e})"
        if why == "lowered":
            changed = True
        elif why:
            g.log.append(f"QDQ group around {node.op_type} {node.name} stays float (DequantizeLinear/QuantizeLinear "
                         f"kept): {why}")
    return changed


# --- shapes of com.microsoft (QOperator) ops ------------------------------------------
# onnx has no schemas for onnxruntime's contrib ops, so its shape inference leaves
# their outputs (and everything after them) without shapes; these functions give the
# outputs theirs from the inputs', and inference is run again past them.

def _bcast_shape(a, b):
    r = max(len(a), len(b))
    a, b = (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def _ms_qgemm(node, vi):
    a, b = vi[node.input[0]][1], vi[node.input[3]][1]
    m = a[1] if _attr(node, "transA", 0) else a[0]
    n = b[0] if _attr(node, "transB", 0) else b[1]
    if len(node.input) > 8 and node.input[8]:
        t = vi[node.input[8]][0]
    elif len(node.input) > 7 and node.input[7]:
        t = onnx.TensorProto.UINT8
    else:
        t = onnx.TensorProto.FLOAT
    return [(t, (m, n))]


def _ms_concat(node, vi):
    shapes = [vi[i][1] for i in node.input[2::3]]
    axis = _attr(node, "axis", 0) % len(shapes[0])
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(vi[node.input[2]][0], tuple(out))]


def _ms_avgpool(node, vi):
    """QLinearAveragePool's output shape, as onnxruntime computes it (channels_last:
    [N, D1.., C]; ceil_mode never starts a window in the end padding)."""
    t, x = vi[node.input[0]]
    cl = bool(_attr(node, "channels_last", 0))
    sp = list(x[1:-1] if cl else x[2:])
    k = list(_attr(node, "kernel_shape"))
    s = list(_attr(node, "strides", [1] * len(k)))
    pads = list(_attr(node, "pads", [0] * 2 * len(k)))
    auto = _attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    ceil = bool(_attr(node, "ceil_mode", 0))
    out = []
    for i, n in enumerate(sp):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-n // s[i]))
            continue
        pb, pe = (0, 0) if auto == "VALID" else (pads[i], pads[i + len(k)])
        room = n + pb + pe - k[i]
        if room < 0:
            return [(t, None)]
        o = (-(-room // s[i]) if ceil else room // s[i]) + 1
        if ceil and (o - 1) * s[i] >= n + pb:
            o -= 1
        out.append(o)
    return [(t, (x[0], *out, x[-1]) if cl else (x[0], x[1], *out))]


def _ms_dqmatmul(node, vi):
    a, b = vi[node.input[0]][1], vi[node.input[1]][1]
    return [(onnx.TensorProto.FLOAT, tuple(a[:-1]) + (b[1],))]


_MS_SHAPES = {
    "QLinearAdd": lambda n, vi: [(vi[n.input[0]][0], _bcast_shape(vi[n.input[0]][1], vi[n.input[3]][1]))],
    "QLinearMul": lambda n, vi: [(vi[n.input[0]][0], _bcast_shape(vi[n.input[0]][1], vi[n.input[3]][1]))],
    "QLinearGlobalAveragePool": lambda n, vi: [(vi[n.input[0]][0], tuple(vi[n.input[0]][1][:2]) + (1,) * (len(vi[n.input[0]][1]) - 2))],
    "QLinearSigmoid": lambda n, vi: [vi[n.input[0]]],
    "QLinearLeakyRelu": lambda n, vi: [vi[n.input[0]]],
    "QGemm": _ms_qgemm,
    "QLinearConcat": _ms_concat,
    "QLinearAveragePool": _ms_avgpool,
    "DynamicQuantizeMatMul": _ms_dqmatmul,
}


def _contrib_shapes(nodes, vi: dict) -> dict:
    """Output (elem_type, shape) of each com.microsoft node that onnx left without
    one, whose inputs all have static shapes; {} when there is none to add."""
    found = {}
    for node in nodes:
        fn = _MS_SHAPES.get(node.op_type) if node.domain == _MS else None
        if fn is None or all(o in vi and vi[o][1] is not None for o in node.output if o):
            continue
        if not all(i in vi and vi[i][1] is not None and all(isinstance(d, int) for d in vi[i][1])
                   for i in node.input if i):
            continue
        try:
            outs = fn(node, vi)
        except (IndexError, KeyError, ZeroDivisionError, TypeError):
            continue
        for name, (t, shape) in zip(node.output, outs):
            if name and shape is not None:
                found[name] = vi[name] = (t, tuple(int(d) for d in shape))
    return found


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
    for _ in range(len(g.nodes)):  # past com.microsoft nodes: their shapes, then onnx's again
        extra = _contrib_shapes(g.nodes, {**vi, **{k: (helper.np_dtype_to_tensor_dtype(v.dtype), tuple(v.shape))
                                                   for k, v in g.consts.items()}})
        for k in extra:
            vi[k] = extra[k]
        if not extra:
            break
        model.graph.value_info.extend(helper.make_tensor_value_info(k, t, s) for k, (t, s) in sorted(extra.items()))
        try:
            inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        except Exception as e:
            raise ModelError(f"{g.source}: shape inference failed: {e}") from None
        for v in list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.get(v.name, (0, None))[1] is None:
                vi[v.name] = (v.type.tensor_type.elem_type, _shape_of(v))
    for name, arr in g.consts.items():
        vi[name] = (helper.np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
    g.value_info = vi


def since_version(g: Graph, node) -> int:
    if node.domain == _MINIBUILD:
        return 1
    if node.name in g.versions:
        return g.versions[node.name]
    try:
        return onnx.defs.get_schema(node.op_type, g.opsets.get(node.domain, 1), node.domain).since_version
    except onnx.defs.SchemaError:
        return g.opsets.get(node.domain, 1)


def _is_static(g: Graph, name: str) -> bool:
    info = g.value_info.get(name)
    return info is not None and info[1] is not None and all(isinstance(d, int) and d >= 0 for d in info[1])


def _knows_shapes(g: Graph, node) -> bool:
    """Whether onnx has a schema (and so a shape-inference function) for the node.
    (ai.minibuild's fused ops have none: they keep the shapes inferred before fusing,
    so one without shapes came in with the model.)"""
    if node.domain == _MS and node.op_type in _MS_SHAPES:
        return True  # minibuild's own shape functions for the QOperator ops
    try:
        onnx.defs.get_schema(node.op_type, g.opsets.get(node.domain, 1), node.domain)
        return True
    except onnx.defs.SchemaError:
        return False


def _op_name(node) -> str:
    return f"{domains.canonical(node.domain)}.{node.op_type}"


def _shape_cause(g: Graph, name: str) -> str:
    """Why `name` has no static shape: the first node, walking up from it, that
    cannot give its outputs one."""
    seen = set()
    while True:
        prod = g.producer(name)
        if prod is None or id(prod) in seen:
            return (f"value '{name}' is produced by no node and is no input or constant of the graph "
                    f"({g.value_info.get(name, (0, 'unknown'))[1]})")
        seen.add(id(prod))
        if not _knows_shapes(g, prod):
            unknown = sorted({_op_name(n) for n in g.nodes if not _knows_shapes(g, n)})
            domain = domains.canonical(prod.domain)
            why = (f"node '{prod.name}' ({_op_name(prod)}, domain '{domain}') is an operator onnx has no schema for "
                   f"(opset {g.opsets.get(prod.domain, 'not imported')}), so static shape inference stops there and "
                   f"nothing after it has a shape. minirt does not support this operator")
            if domain == _MINIBUILD:
                why = (f"node '{prod.name}' ({_op_name(prod)}) is one of minibuild's own fused operators, which the "
                       "optimiser writes and onnx cannot infer shapes for; a model must not use them itself: "
                       "write the plain ai.onnx operators (Conv, Gemm, Relu, ...) and minibuild fuses them")
                return why
            if domain == "com.microsoft":
                why += (f" (com.microsoft is onnxruntime's contrib-operator domain; of its operators minibuild "
                        f"infers the shapes of {', '.join(sorted(_MS_SHAPES))}: export without onnxruntime's "
                        "contrib ops, or quantise with quant_format=QuantFormat.QDQ to get standard ai.onnx operators)")
            why += f". Replace or remove these nodes; operators onnx does not know here: {', '.join(unknown)}"
            return why
        unresolved = [i for i in prod.input if i and i not in g.consts and not _is_static(g, i)]
        if unresolved:
            name = unresolved[0]
            continue
        runtime = [i for i in prod.input if i and i not in g.consts]
        return (f"node '{prod.name}' ({_op_name(prod)}) gives output '{name}' a shape that depends on the values "
                f"of {', '.join(repr(i) for i in runtime) or 'its inputs'}, which are known only at run time; minirt "
                "fixes every shape at build time: make those values constants of the model, or replace the node")


def check_static(g: Graph):
    """Every value a node reads or writes has a static shape. The graph inputs have
    one already (from_model), so a value without one is always a node's doing:
    the message names that node, not the inputs."""
    for node in g.nodes:
        for name in list(node.input) + list(node.output):
            if not name or name in g.consts or _is_static(g, name):
                continue
            info = g.value_info.get(name)
            raise ModelError(
                f"{g.source}: node '{node.name}' ({node.op_type}): value '{name}' has no static shape "
                f"({info[1] if info else 'unknown'}) after shape inference: {_shape_cause(g, name)}"
            )


def optimize(g: Graph, available: set[tuple[str, str]]) -> Graph:
    """Run every rewrite to a fixed point; shapes are inferred before fusing (onnx
    cannot infer shapes through ai.minibuild ops) and kept through it."""
    lower_qdq(g, available)
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
    fuse_silu(g, available)  # first: Conv -> SiLU fuses into the convolution
    fuse_conv_epilogue(g, available)
    fuse_activations(g, available)
    fuse_conv_input_scale(g, available)  # after the epilogue: the residual rides along
    # Gelu first: a linear layer's Gelu joins its FusedMatMulAct.
    for fuse in (fuse_gelu, fuse_dynamic_matmul, fuse_matmul_bias, fuse_layernorm):
        fuse(g, available)
    check_static(g)
    return g

"""onnxruntime as the reference, exact for int8 on every x86 host.

onnxruntime's uint8 x int8 integer GEMM on AVX2 CPUs without VNNI (AMD EPYC up to
Zen 3, Intel before Ice Lake / Alder Lake) multiplies byte pairs with vpmaddubsw,
whose 16-bit sums saturate: two products of 255 x 127 already pass 32,767. Models
with full-range int8 weights (quantize_static's default) then get wrong outputs
from onnxruntime on those hosts, not from minirt. Its uint8 x uint8 path widens to
16 bits first and is exact, and shifting int8 weights and their zero points by 128
to uint8 leaves every product (w - zero point) unchanged. So where onnxruntime is
seen to saturate, the reference runs on that shifted copy of the model: the same
mathematics, computed without the overflow. Elsewhere it runs the model as given.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (domain, op) -> (activation zero-point input, or None where onnxruntime quantises
# the activation to uint8 itself; weight input; weight zero-point input; weight scale
# input, or None), for the integer GEMMs whose weights may be int8.
_INTEGER_GEMMS = {
    ("", "QLinearConv"): (2, 3, 5, 4),
    ("", "QLinearMatMul"): (2, 3, 5, 4),
    ("com.microsoft", "QGemm"): (2, 3, 5, 4),
    ("", "ConvInteger"): (2, 1, 3, None),
    ("", "MatMulInteger"): (2, 1, 3, None),
    ("com.microsoft", "MatMulIntegerToFloat"): (4, 1, 5, 3),
    ("com.microsoft", "DynamicQuantizeMatMul"): (None, 1, 3, 2),
}
# Float ops whose weight input a DequantizeLinear of int8 may feed (QDQ models):
# onnxruntime fuses those groups into the integer kernels above.
_QDQ_WEIGHTS = {"Conv": 1, "MatMul": 1, "Gemm": 1}


def _session(model: onnx.ModelProto, threads: int = 1):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@functools.lru_cache(maxsize=None)
def u8s8_saturates() -> bool:
    """True where onnxruntime's uint8 x int8 GEMM overflows 16-bit pair sums on
    this CPU: a 1 x 64 by 64 x 16 MatMulInteger of 255s and 127s (exactly
    64 x 255 x 127 = 2,072,640 each) comes out different."""
    a = np.full((1, 64), 255, np.uint8)
    b = np.full((64, 16), 127, np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 16])],
                          [numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    (y,) = _session(m).run(None, {"a": a})
    return bool((y != 64 * 255 * 127).any())


def _dtypes(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named value the model states or onnx can infer."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - contrib ops or odd models: what is declared still counts
        inferred = model
    g = inferred.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*g.input, *g.output, *g.value_info]}
    types.update({t.name: t.data_type for t in g.initializer})
    for node in g.node:  # DynamicQuantizeLinear's y is uint8 (onnx cannot infer past contrib ops)
        if node.op_type == "DynamicQuantizeLinear":
            types.setdefault(node.output[0], TensorProto.UINT8)
    return types


def to_uint8_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of MODEL whose int8 weights (and their zero points) of uint8-activation
    integer GEMMs and QDQ weight dequantisations are uint8, shifted by 128: every
    (weight - zero point) is the same number, so the outputs are the same. Weights
    that are initializers are shifted in place; weights fed at run time get a
    Cast / Add / Cast before their node."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    types = _dtypes(model)
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            consumers.setdefault(name, []).append((n, i))
    made: dict[str, str] = {}
    before: dict[int, list] = {}  # node index -> nodes to insert before it
    at = 0  # the index of the node being rewritten (the loop below sets it)

    def new_init(name: str, value: np.ndarray) -> str:
        g.initializer.append(numpy_helper.from_array(value, name))
        inits[name] = g.initializer[-1]
        return name

    def shifted(name: str) -> str:
        """The uint8 twin of int8 value NAME: an initializer, or computed before node `at`."""
        if name not in made:
            if name in inits:
                v = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
                made[name] = new_init(f"{name}__u8", v.astype(np.uint8))
            else:
                one28 = "__ortref_128" if "__ortref_128" in inits else new_init("__ortref_128", np.array(128, np.int32))
                wide, out = f"{name}__i32", f"{name}__u8"
                before.setdefault(at, []).extend([
                    helper.make_node("Cast", [name], [wide + "_c"], to=TensorProto.INT32),
                    helper.make_node("Add", [wide + "_c", one28], [wide]),
                    helper.make_node("Cast", [wide], [out], to=TensorProto.UINT8)])
                made[name] = out
        return made[name]

    def zero_point_128(scale: str | None) -> str:
        """A uint8 zero point of 128 for an absent int8 one (0), shaped like SCALE."""
        shape = numpy_helper.to_array(inits[scale]).shape if scale in inits else ()
        key = f"__ortref_zp128_{'x'.join(map(str, shape))}"
        return key if key in inits else new_init(key, np.full(shape, 128, np.uint8))

    def is_int8(name: str) -> bool:
        return bool(name) and types.get(name) == TensorProto.INT8

    def uint8_activation(node, zp_index: int | None) -> bool:
        """Whether NODE's activation (input 0) is uint8: its zero point's type, else its own."""
        if zp_index is None:
            return True
        has_zp = zp_index < len(node.input) and node.input[zp_index]
        return types.get(node.input[zp_index] if has_zp else node.input[0]) == TensorProto.UINT8

    def shift_weight(node, w: int, wzp: int, scale: str | None):
        zp = node.input[wzp] if wzp < len(node.input) else ""
        if zp and not is_int8(zp):
            return
        new_zp = shifted(zp) if zp else zero_point_128(scale)
        node.input[w] = shifted(node.input[w])
        while len(node.input) <= wzp:
            node.input.append("")
        node.input[wzp] = new_zp

    for at, node in enumerate(g.node):
        spec = _INTEGER_GEMMS.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
        if spec:
            azp, w, wzp, ws = spec
            if w < len(node.input) and is_int8(node.input[w]) and uint8_activation(node, azp):
                shift_weight(node, w, wzp, node.input[ws] if ws is not None else None)
            continue
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") and is_int8(node.input[0]):
            feeds_weight = False
            for user, i in consumers.get(node.output[0], []):
                act = producer.get(user.input[0]) if _QDQ_WEIGHTS.get(user.op_type) == i else None
                if act is not None and act.op_type == "DequantizeLinear" and uint8_activation(act, 2):
                    feeds_weight = True
            if feeds_weight:
                shift_weight(node, 0, 2, node.input[1])
    if before:
        nodes = [m for i, n in enumerate(g.node) for m in [*before.get(i, []), n]]
        del g.node[:]
        g.node.extend(nodes)
    if made:  # drop the int8 originals nothing reads any more (onnxruntime warns of each)
        used = {name for n in g.node for name in n.input} | {o.name for o in g.output}
        keep = [t for t in g.initializer if t.name in used or t.name not in made]
        del g.initializer[:]
        g.initializer.extend(keep)
    return model


def reference_session(model, threads: int = 1):
    """An onnxruntime CPU session computing MODEL's (a ModelProto or a path) exact
    outputs on this host: on the uint8-weight copy where onnxruntime's uint8 x int8
    GEMM saturates."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    return _session(to_uint8_weights(model) if u8s8_saturates() else model, threads)

"""The copy-only ops on every element type: Reshape, Flatten, Squeeze, Unsqueeze,
Identity, Dropout (views, one object for any type), Concat, Split, Slice, Transpose
(one object per element size or for any type) and Pad. Each case is a one-node
model run through the whole pipeline on int64, bool, uint8, float16 and float64
tensors (and the other types of the table where the op serves them), compared with
numpy's answer; and builds show that one object serves several types."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

testing = pytest.importorskip("minibuild.testing")

RNG = np.random.default_rng(77)

# The types the issue asks for first, then the rest of the table.
TYPES = ["int64", "bool", "uint8", "float16", "float64"]
MORE_TYPES = ["float32", "int32", "int16", "int8", "uint16", "uint32", "uint64"]


def values(dtype: str, *shape) -> np.ndarray:
    """Distinct-looking values of `dtype` (bool alternates), so a misplaced element shows."""
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        return (RNG.integers(0, 2, n) > 0).reshape(shape)
    if dtype.startswith("float"):
        return RNG.standard_normal(n).astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    v = RNG.integers(0, 1000, n).astype(dtype)
    # Values at the type's extremes catch a copy that narrows or sign-extends.
    v[:: max(1, n // 3)] = info.max
    v[1 :: max(1, n // 3)] = info.min
    return v.astype(dtype).reshape(shape)


def one_node(op, feeds, consts=None, opset=17, n_out=1, inputs=None, outputs=None, **attrs):
    """A model of one `op` node with typed runtime inputs `feeds` and initializers
    `consts`; `inputs` orders the node's inputs ('' for an omitted one). Output
    types and shapes come from ONNX shape inference (the checker wants them), or
    from `outputs`, arrays of the expected ones."""
    consts = consts or {}
    names = inputs if inputs is not None else list(feeds) + list(consts)
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(f"y{i}", 0, None) for i in range(n_out)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if outputs is not None:
        declared = [helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for i, v in enumerate(outputs)]
    else:
        declared = list(onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output)
    del model.graph.output[:]
    model.graph.output.extend(declared)
    return model


def run(model, feeds):
    # Every feed stays a runtime input (the harness would fold integer feeds in as constants).
    return testing.run_with_minirt(model, feeds, constant_inputs=[])


def check(model, feeds, want):
    got = run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def i64(*v):
    return np.array(v, np.int64)


ALL = TYPES + MORE_TYPES


# --- views: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout --------------------

@pytest.mark.parametrize("dtype", ALL)
def test_reshape(dtype):
    x = values(dtype, 2, 3, 4)
    check(one_node("Reshape", {"x": x}, {"s": i64(4, 0, -1)}), {"x": x}, [x.reshape(4, 3, 2)])


@pytest.mark.parametrize("dtype", TYPES)
def test_flatten(dtype):
    x = values(dtype, 2, 3, 4, 5)
    check(one_node("Flatten", {"x": x}, axis=-2), {"x": x}, [x.reshape(6, 20)])


@pytest.mark.parametrize("dtype", TYPES)
def test_squeeze_unsqueeze(dtype):
    x = values(dtype, 3, 1, 4, 1)
    check(one_node("Squeeze", {"x": x}, {"a": i64(1, -1)}), {"x": x}, [x.reshape(3, 4)])
    check(one_node("Squeeze", {"x": x}, opset=11, axes=[3]), {"x": x}, [x.reshape(3, 1, 4)])
    check(one_node("Unsqueeze", {"x": x}, {"a": i64(0, -1)}), {"x": x}, [x.reshape(1, 3, 1, 4, 1, 1)])


@pytest.mark.parametrize("dtype", ALL)
def test_identity(dtype):
    x = values(dtype, 5, 7)
    check(one_node("Identity", {"x": x}), {"x": x}, [x])


@pytest.mark.parametrize("dtype", ["float16", "float64", "float32"])
@pytest.mark.parametrize("opset", [7, 13])
def test_dropout_inference_mask(dtype, opset):
    # Opset 7 gives the mask the input's type, 10+ bool; inference keeps every element.
    x = values(dtype, 4, 6)
    mask = np.ones_like(x) if opset < 10 else np.ones(x.shape, bool)
    check(one_node("Dropout", {"x": x}, opset=opset, n_out=2, outputs=[x, mask]), {"x": x}, [x, mask])


# --- Concat and Split: byte runs ---------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    shapes = {0: [(1, 3, 5), (2, 3, 5), (3, 3, 5)], 1: [(2, 1, 5), (2, 4, 5), (2, 2, 5)],
              -1: [(2, 3, 1), (2, 3, 7), (2, 3, 2)]}[axis]
    feeds = {f"x{i}": values(dtype, *s) for i, s in enumerate(shapes)}
    check(one_node("Concat", feeds, axis=axis), feeds, [np.concatenate(list(feeds.values()), axis=axis)])


@pytest.mark.parametrize("dtype", TYPES)
def test_concat_same_input_twice(dtype):
    x = values(dtype, 3, 4)
    check(one_node("Concat", {"x": x}, inputs=["x", "x"], axis=0), {"x": x}, [np.concatenate([x, x])])


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("axis,split", [(0, [1, 3]), (1, [2, 2, 1]), (-1, [3, 3])])
def test_split(dtype, axis, split):
    shape = {0: (4, 3, 2), 1: (2, 5, 3), -1: (2, 3, 6)}[axis]
    x = values(dtype, *shape)
    want = np.split(x, np.cumsum(split)[:-1], axis=axis)
    check(one_node("Split", {"x": x}, {"s": i64(*split)}, n_out=len(split), axis=axis), {"x": x}, want)
    # Opset 11: the sizes as an attribute.
    check(one_node("Split", {"x": x}, opset=11, n_out=len(split), axis=axis, split=split), {"x": x}, want)

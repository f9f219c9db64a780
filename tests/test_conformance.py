"""ONNX's own node test cases (onnx.backend.test.case.node) through minirt.

Every case whose operators are all in ops_registry/ and whose tensors all have an
element type of minibuild's table (minibuild/dtypes.py) runs through the whole
pipeline and must match ONNX's expected outputs. Inputs the registry says must be
build-time constants (shapes, axes: `constant_inputs`, and non-float inputs of the
float32 one-type kernels) become constants, as a real build makes them; the others
(Gather's indices, Where's condition, Cast's input) stay run-time data. A case the
registry itself declares unsupported (an attribute value, a type signature or an
input it does not serve) is rejected at select time with a message, and one a
kernel refuses at session creation with MRT_STATUS_UNSUPPORTED (training-mode
Dropout) likewise; those are counted and listed, never silently dropped."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.node import collect_testcases

from minibuild import dtypes, registry as registry_mod
from minibuild.errors import UnsupportedOpsError
from minibuild.testing import run_with_minirt

REGISTRY = registry_mod.load()
COUNTS = {"ran": 0, "passed": 0, "declared_unsupported": []}
PER_OP = defaultdict(lambda: [0, 0])  # op -> [qualifying cases, passed]
_NUMPY_TYPES = {np.dtype(np.bool_ if t.name == "bool" else t.name) for t in dtypes.TABLE}


def _array(value):
    """A case's tensor as numpy, or None when minirt has no such element type
    (strings, bfloat16, float8, 4-bit types, sequences)."""
    if isinstance(value, TensorProto):
        if value.data_type not in dtypes.BY_ONNX:
            return None
        value = numpy_helper.to_array(value)
    if isinstance(value, np.generic):  # a 0-d input given as a numpy scalar (Range's bounds)
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype not in _NUMPY_TYPES:
        return None
    return value


def _data_sets(case):
    """The case's (inputs, outputs) as numpy arrays, or None if a tensor has a type minirt lacks."""
    out = []
    for inputs, outputs in case.data_sets:
        ins, outs = [_array(a) for a in inputs], [_array(a) for a in outputs]
        if any(a is None for a in ins + outs):
            return None
        out.append((ins, outs))
    return out


def _qualifies(case) -> bool:
    graph = case.model.graph
    for node in graph.node:
        domain = node.domain or "ai.onnx"
        if (domain, node.op_type) not in REGISTRY.ops:
            return False
    for vi in list(graph.input) + list(graph.output):
        t = vi.type
        if not t.HasField("tensor_type"):
            return False  # sequences, optionals: minirt runs tensors only
        if t.tensor_type.elem_type not in dtypes.BY_ONNX:
            return False
    return _data_sets(case) is not None


CASES = sorted((c for c in collect_testcases(None) if _qualifies(c)), key=lambda c: c.name)
for _c in CASES:
    for _op in {n.op_type for n in _c.model.graph.node}:
        PER_OP[_op][0] += 1


def test_suite_is_not_empty():
    # The registry serves dozens of ops; a broken collection would silently test nothing.
    assert len(CASES) > 150, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    graph = case.model.graph
    names = [i.name for i in graph.input]
    for inputs, outputs in _data_sets(case):
        feeds = dict(zip(names, inputs))
        try:
            got = run_with_minirt(case.model, feeds)
        except UnsupportedOpsError as e:
            COUNTS["declared_unsupported"].append(case.name)
            pytest.skip(f"registry declares this case unsupported: {e.missing[0]}")
        except RuntimeError as e:
            # A kernel's prepare refusing what it does not implement (training-mode
            # Dropout) with MRT_STATUS_UNSUPPORTED and its message: declared, and listed.
            if getattr(e, "status", None) != "UNSUPPORTED":
                raise
            COUNTS["declared_unsupported"].append(case.name)
            pytest.skip(f"the kernel declares this case unsupported: {e}")
        COUNTS["ran"] += 1
        assert len(got) == len(outputs)
        for g, want in zip(got, outputs):
            assert g.shape == want.shape
            assert g.dtype == want.dtype
            if np.issubdtype(want.dtype, np.floating):
                # The tolerances ONNX's own backend runner applies to this case.
                np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(g, want)
        COUNTS["passed"] += 1
    for op in {n.op_type for n in graph.node}:
        PER_OP[op][1] += 1


def test_zz_report_counts(capsys):
    """Runs last (alphabetical within the module): prints how many cases ran."""
    with capsys.disabled():
        print(f"\nONNX node conformance: {COUNTS['passed']} passed of {COUNTS['ran']} run "
              f"({len(CASES)} qualifying cases; {len(COUNTS['declared_unsupported'])} declared unsupported by the registry: "
              f"{', '.join(COUNTS['declared_unsupported'])})")
        print("per op (passed/qualifying): " + ", ".join(f"{op} {p}/{q}" for op, (q, p) in sorted(PER_OP.items())))

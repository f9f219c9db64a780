"""ONNX's own node test cases (onnx.backend.test.case.node) through minirt.

Every case whose operators are all in ops_registry/ and whose tensors are float32
(non-float inputs such as shapes and axes become build-time constants, as a real
build makes them) runs through the whole pipeline and must match ONNX's expected
outputs. A case the registry itself declares unsupported (an attribute value or
input it lists as unsupported, e.g. training mode) is rejected at select time with
a message; those are counted and listed, never silently dropped."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.backend.test.case.node import collect_testcases

from minibuild import registry as registry_mod
from minibuild.errors import UnsupportedOpsError
from minibuild.testing import run_with_minirt

REGISTRY = registry_mod.load()
COUNTS = {"ran": 0, "passed": 0, "declared_unsupported": []}


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
    for inputs, outputs in case.data_sets:
        for arr in list(outputs):
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
                return False
        for arr in inputs:
            if not isinstance(arr, np.ndarray):
                return False
            if np.issubdtype(arr.dtype, np.floating) and arr.dtype != np.float32:
                return False
    return True


CASES = sorted((c for c in collect_testcases(None) if _qualifies(c)), key=lambda c: c.name)


def test_suite_is_not_empty():
    # The registry serves dozens of ops; a broken collection would silently test nothing.
    assert len(CASES) > 150, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    graph = case.model.graph
    names = [i.name for i in graph.input]
    for k, (inputs, outputs) in enumerate(case.data_sets):
        feeds = dict(zip(names, inputs))
        try:
            got = run_with_minirt(case.model, feeds)
        except UnsupportedOpsError as e:
            COUNTS["declared_unsupported"].append(case.name)
            pytest.skip(f"registry declares this case unsupported: {e.missing[0]}")
        COUNTS["ran"] += 1
        assert len(got) == len(outputs)
        for g, want in zip(got, outputs):
            assert g.shape == want.shape
            # The tolerances ONNX's own backend runner applies to this case.
            np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
        COUNTS["passed"] += 1


def test_zz_report_counts(capsys):
    """Runs last (alphabetical within the module): prints how many cases ran."""
    with capsys.disabled():
        print(f"\nONNX node conformance: {COUNTS['passed']} passed of {COUNTS['ran']} run "
              f"({len(CASES)} qualifying cases; {len(COUNTS['declared_unsupported'])} declared unsupported by the registry: "
              f"{', '.join(COUNTS['declared_unsupported'])})")

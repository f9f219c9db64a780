"""The element-type table (minibuild/dtypes.py) against ONNX and numpy, and every
copy generated from it against what the table renders now."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from minibuild import dtypes


@pytest.mark.parametrize("t", dtypes.TABLE, ids=[t.name for t in dtypes.TABLE])
def test_table_agrees_with_onnx_and_numpy(t):
    np_type = np.dtype(t.name if t.name != "bool" else np.bool_)
    assert onnx.helper.np_dtype_to_tensor_dtype(np_type) == t.onnx
    assert np_type.itemsize == t.size
    assert onnx.TensorProto.DataType.Name(t.onnx).lower() == {"float32": "float", "float64": "double"}.get(t.name, t.name)
    assert t.onnx_name == onnx.TensorProto.DataType.Name(t.onnx).lower()


def test_generated_copies_are_current():
    # A hand edit of a copy, or a table change without `python -m minibuild.dtypes`, fails here.
    assert dtypes.stale() == []


def test_a_drifted_copy_is_detected(tmp_path):
    for rel in dtypes.GENERATED:
        text = (dtypes.ROOT / rel).read_text()
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text.replace("MRT_DTYPE_INT64 = 7", "MRT_DTYPE_INT64 = 8")
                                    .replace("INT64(7, 8)", "INT64(7, 4)").replace("7: (np.int64", "7: (np.int32")
                                    .replace("case MRT_DTYPE_INT64: return 8;", "case MRT_DTYPE_INT64: return 4;"))
    assert sorted(dtypes.stale(tmp_path)) == sorted(dtypes.GENERATED)


def test_python_binding_uses_the_table():
    import importlib.util
    spec = importlib.util.spec_from_file_location("minirt_dtypes", dtypes.ROOT / "packaging/python/minirt/_dtypes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert {v: np.dtype(n).name for v, (n, _) in mod.DTYPES.items()} == \
        {t.onnx: np.dtype(t.name if t.name != "bool" else np.bool_).name for t in dtypes.TABLE}
    assert mod.DTYPES[1][1] == "tensor(float)" and mod.DTYPES[7][1] == "tensor(int64)"

"""minirt element types: ONNX value -> (numpy type, onnxruntime type string)."""

import numpy as np

# BEGIN generated element types (from minibuild/dtypes.py by `python -m minibuild.dtypes`; do not edit)
DTYPES = {
    1: (np.float32, "tensor(float)"),
    2: (np.uint8, "tensor(uint8)"),
    3: (np.int8, "tensor(int8)"),
    4: (np.uint16, "tensor(uint16)"),
    5: (np.int16, "tensor(int16)"),
    6: (np.int32, "tensor(int32)"),
    7: (np.int64, "tensor(int64)"),
    9: (np.bool_, "tensor(bool)"),
    10: (np.float16, "tensor(float16)"),
    11: (np.float64, "tensor(double)"),
    12: (np.uint32, "tensor(uint32)"),
    13: (np.uint64, "tensor(uint64)"),
}
# END generated element types

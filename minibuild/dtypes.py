"""The element-type table: the one list of tensor element types minirt knows.

Every other copy is generated from TABLE, between `BEGIN/END generated element types`
markers, by `python -m minibuild.dtypes` (tests/test_dtypes.py fails when one is stale):

    kernels_src/include/minirt.h               the C enum mrt_dtype
    kernels_src/runtime/status.c               mrt_dtype_size, mrt_dtype_name
    packaging/python/minirt/_dtypes.py         the Python binding's numpy / onnxruntime names
    packaging/android/java/.../DataType.java   the Java API's enum

Those files stay plain sources in the tree, because users read and compile them
without minibuild (the public header, the Java API) and the Python binding is imported
straight from the tree by the test harness. The generated kernel table adds a
`_Static_assert` per type, so a C enum that drifted from this table cannot compile.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DType:
    name: str        # registry, manifest and numpy name
    onnx: int        # ONNX TensorProto.DataType value (also minirt's mrt_dtype value)
    size: int        # bytes per element
    c_type: str      # the C type kernels compute in
    ort: str         # onnxruntime's name in required_operators_and_types.config
    onnx_name: str   # ONNX's type string: tensor(<onnx_name>)

    @property
    def enum(self) -> str:
        return f"MRT_DTYPE_{self.name.upper()}"


TABLE = (
    DType("float32", 1, 4, "float", "float", "float"),
    DType("uint8", 2, 1, "uint8_t", "uint8_t", "uint8"),
    DType("int8", 3, 1, "int8_t", "int8_t", "int8"),
    DType("uint16", 4, 2, "uint16_t", "uint16_t", "uint16"),
    DType("int16", 5, 2, "int16_t", "int16_t", "int16"),
    DType("int32", 6, 4, "int32_t", "int32_t", "int32"),
    DType("int64", 7, 8, "int64_t", "int64_t", "int64"),
    DType("bool", 9, 1, "uint8_t", "bool", "bool"),
    DType("float16", 10, 2, "uint16_t", "MLFloat16", "float16"),
    DType("float64", 11, 8, "double", "double", "double"),
    DType("uint32", 12, 4, "uint32_t", "uint32_t", "uint32"),
    DType("uint64", 13, 8, "uint64_t", "uint64_t", "uint64"),
)
BY_NAME = {t.name: t for t in TABLE}
BY_ONNX = {t.onnx: t for t in TABLE}


# The type a size-only kernel (a copy, a gather) computes in, per element size.
BY_SIZE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def get(name: str) -> DType:
    return BY_NAME[name]


# --- the generated copies ---------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "BEGIN generated element types"
END = "END generated element types"


def _c_enum() -> str:
    lines = ["  MRT_DTYPE_UNDEFINED = 0,"]
    lines += [f"  {t.enum} = {t.onnx}," for t in TABLE]
    return "\n".join(lines)


def _c_functions() -> str:
    size = "\n".join(f"    case {t.enum}: return {t.size};" for t in TABLE)
    name = "\n".join(f"    case {t.enum}: return \"{t.name}\";" for t in TABLE)
    return (f"size_t mrt_dtype_size(uint32_t dtype) {{\n  switch (dtype) {{\n{size}\n    default: return 0;\n  }}\n}}\n\n"
            f"const char *mrt_dtype_name(uint32_t dtype) {{\n  switch (dtype) {{\n{name}\n"
            "    default: return \"unknown\";\n  }\n}")


def _python() -> str:
    rows = "\n".join(f"    {t.onnx}: (np.{'bool_' if t.name == 'bool' else t.name}, \"tensor({t.onnx_name})\"),"
                     for t in TABLE)
    return f"DTYPES = {{\n{rows}\n}}"


def _java() -> str:
    rows = [f"    {t.name.upper()}({t.onnx}, {t.size})" for t in TABLE]
    return ",\n".join(["    /** A type this version of the Java API does not know. */\n    UNKNOWN(0, 0)"] + rows) + ";"


# file -> (comment opener, comment closer, body generator)
GENERATED = {
    "kernels_src/include/minirt.h": ("/*", " */", _c_enum),
    "kernels_src/runtime/status.c": ("/*", " */", _c_functions),
    "packaging/python/minirt/_dtypes.py": ("#", "", _python),
    "packaging/android/java/ai/minibuild/minirt/DataType.java": ("//", "", _java),
}


def _block(opener: str, closer: str, body: str) -> str:
    note = "from minibuild/dtypes.py by `python -m minibuild.dtypes`; do not edit"
    return (f"{opener} {BEGIN} ({note}){closer}\n{body}\n{opener} {END}{closer}")


def render(rel: str, text: str) -> str:
    """`text` with its generated block replaced by the table's current rendering."""
    opener, closer, gen = GENERATED[rel]
    pattern = re.compile(rf"^[ \t]*{re.escape(opener)} {BEGIN}.*?^[ \t]*{re.escape(opener)} {END}[^\n]*", re.S | re.M)
    if not pattern.search(text):
        raise ValueError(f"{rel}: no '{BEGIN}' ... '{END}' block")
    return pattern.sub(lambda _: _block(opener, closer, gen()), text, count=1)


def stale(root: Path = ROOT) -> list[str]:
    """Generated copies that differ from what the table renders now."""
    return [rel for rel in GENERATED if render(rel, (root / rel).read_text()) != (root / rel).read_text()]


def main() -> int:
    for rel in GENERATED:
        path = ROOT / rel
        text = path.read_text()
        new = render(rel, text)
        if new != text:
            path.write_text(new)
            print(f"updated {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

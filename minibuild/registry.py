"""ops_registry/*.yaml: the one list of operators, loaded and checked against its schema."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import domains, resources
from .errors import RegistryError

# Element type names used in the registry and manifest, with ONNX TensorProto
# values and the names onnxruntime's reduced-build config uses.
DTYPES = {
    "float32": (1, "float"),
    "uint8": (2, "uint8_t"),
    "int8": (3, "int8_t"),
    "int32": (6, "int32_t"),
    "int64": (7, "int64_t"),
    "bool": (9, "bool"),
    "float16": (10, "MLFloat16"),
}
DTYPE_BY_ONNX = {v[0]: k for k, v in DTYPES.items()}
C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOMAINS = {domains.ONNX, domains.MINIBUILD}

_OP_KEYS = {"op", "domain", "versions", "type_constraint", "type_from", "source", "speed",
            "requires", "constant_inputs", "types", "attributes", "notes"}


@dataclass(frozen=True)
class Kernel:
    dtype: str
    prepare: str
    run: str


@dataclass(frozen=True)
class OpEntry:
    op: str
    domain: str
    since_min: int
    since_max: int
    type_constraint: str
    type_from: tuple[str, int]   # ("input" | "output", index)
    source: str
    speed: bool
    requires: tuple[str, ...]
    constant_inputs: tuple[int, ...]
    kernels: dict[str, Kernel]
    attributes: dict[str, object]  # name -> "any" or list of allowed values
    path: Path

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op)

    def serves(self, since_version: int, dtype: str) -> bool:
        return self.since_min <= since_version <= self.since_max and dtype in self.kernels


@dataclass(frozen=True)
class SupportUnit:
    name: str
    source: str
    speed: bool
    path: Path


@dataclass
class Registry:
    ops: dict[tuple[str, str], OpEntry] = field(default_factory=dict)
    support: dict[str, SupportUnit] = field(default_factory=dict)
    root: Path | None = None

    def get(self, domain: str, op: str) -> OpEntry | None:
        return self.ops.get((domain, op))

    def files(self) -> list[Path]:
        return sorted([e.path for e in self.ops.values()] + [s.path for s in self.support.values()])


def _fail(path: Path, msg: str):
    raise RegistryError(f"{path}: {msg}")


def _load_op(path: Path, kernels_root: Path) -> OpEntry:
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        _fail(path, f"not valid YAML: {e}")
    if not isinstance(d, dict):
        _fail(path, "must be a mapping")
    unknown = set(d) - _OP_KEYS
    if unknown:
        _fail(path, f"unknown keys {sorted(unknown)}; allowed: {sorted(_OP_KEYS)}")
    for key in ("op", "domain", "versions", "type_constraint", "type_from", "source", "types"):
        if key not in d:
            _fail(path, f"missing required key '{key}'")
    if d["domain"] not in DOMAINS:
        _fail(path, f"domain '{d['domain']}' is not one of {sorted(DOMAINS)}")
    v = d["versions"]
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x >= 1 for x in v) and v[0] <= v[1]):
        _fail(path, "versions must be [min, max] since_versions, 1 <= min <= max")
    m = re.fullmatch(r"(input|output) (\d+)", str(d["type_from"]))
    if not m:
        _fail(path, "type_from must be 'input N' or 'output N'")
    src = kernels_root / d["source"]
    if not src.is_file():
        _fail(path, f"source {d['source']} does not exist under kernels_src/")
    kernels = {}
    if not isinstance(d["types"], dict) or not d["types"]:
        _fail(path, "types must map element types to {prepare, run}")
    for dtype, syms in d["types"].items():
        if dtype not in DTYPES:
            _fail(path, f"unknown element type '{dtype}'; known: {sorted(DTYPES)}")
        if not isinstance(syms, dict) or set(syms) != {"prepare", "run"}:
            _fail(path, f"types.{dtype} must have exactly 'prepare' and 'run'")
        for s in syms.values():
            if not C_IDENT.match(str(s)):
                _fail(path, f"types.{dtype}: '{s}' is not a C identifier")
        kernels[dtype] = Kernel(dtype, syms["prepare"], syms["run"])
    attrs = d.get("attributes") or {}
    if not isinstance(attrs, dict):
        _fail(path, "attributes must be a mapping")
    for name, allowed in attrs.items():
        if allowed != "any" and not isinstance(allowed, list):
            _fail(path, f"attributes.{name} must be 'any' or a list of allowed values")
    ci = d.get("constant_inputs") or []
    if not all(isinstance(i, int) and i >= 0 for i in ci):
        _fail(path, "constant_inputs must be a list of input indices")
    return OpEntry(
        op=d["op"], domain=d["domain"], since_min=v[0], since_max=v[1],
        type_constraint=str(d["type_constraint"]), type_from=(m.group(1), int(m.group(2))),
        source=d["source"], speed=bool(d.get("speed", False)),
        requires=tuple(d.get("requires") or ()), constant_inputs=tuple(ci),
        kernels=kernels, attributes=attrs, path=path,
    )


def load(root: Path | None = None) -> Registry:
    root = Path(root) if root else resources.path("ops_registry")
    kernels_root = root.parent / "kernels_src"
    reg = Registry(root=root)
    for path in sorted((root / "support").glob("*.yaml")):
        d = yaml.safe_load(path.read_text()) or {}
        if set(d) - {"name", "source", "speed", "notes"} or "name" not in d or "source" not in d:
            _fail(path, "a support unit has exactly: name, source, speed (optional)")
        if not (kernels_root / d["source"]).is_file():
            _fail(path, f"source {d['source']} does not exist under kernels_src/")
        reg.support[d["name"]] = SupportUnit(d["name"], d["source"], bool(d.get("speed", False)), path)
    for path in sorted(root.glob("*.yaml")):
        entry = _load_op(path, kernels_root)
        if entry.key in reg.ops:
            _fail(path, f"{entry.domain}.{entry.op} is already defined in {reg.ops[entry.key].path.name}")
        if path.stem != entry.op:
            _fail(path, f"file name must be the op name: {entry.op}.yaml")
        for req in entry.requires:
            if req not in reg.support:
                _fail(path, f"requires unknown support unit '{req}'")
        reg.ops[entry.key] = entry
    symbols = {}
    for e in reg.ops.values():
        for k in e.kernels.values():
            for s in (k.prepare, k.run):
                if s in symbols:
                    _fail(e.path, f"symbol {s} is already used by {symbols[s]}")
                symbols[s] = e.path.name
    return reg

"""ops_registry/*.yaml: the one list of operators, loaded and checked against its schema."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import domains, dtypes, resources
from .errors import RegistryError

# name -> (ONNX TensorProto value, onnxruntime config name), from the one table.
DTYPES = {t.name: (t.onnx, t.ort) for t in dtypes.TABLE}
DTYPE_BY_ONNX = {t.onnx: t.name for t in dtypes.TABLE}
C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOMAINS = {domains.ONNX, domains.MINIBUILD, domains.MICROSOFT}

_OP_KEYS = {"op", "domain", "versions", "type_constraint", "type_from", "type_constraints", "symbols",
            "signatures", "instantiate", "source", "speed", "requires", "constant_inputs", "in_place", "types", "attributes", "notes"}


def signature_name(types: tuple[str, ...]) -> str:
    """("float32", "int64") -> "float32,int64": how manifests, reports and messages
    spell a type signature (one element type per type constraint, in schema order)."""
    return ",".join(types)


def signature_key(types: tuple[str, ...]) -> int:
    """The runtime's spelling: each constraint's ONNX type value in one byte,
    constraint 0 lowest (a one-constraint signature is its element type's value)."""
    key = 0
    for i, t in enumerate(types):
        key |= DTYPES[t][0] << (8 * i)
    return key


@dataclass(frozen=True)
class Kernel:
    types: tuple[str, ...]   # one element type per type constraint
    prepare: str
    run: str
    family: bool = False     # True: one source instantiated per signature by the build (MRT_KERNEL())
    instance: tuple[str, ...] = ()   # family kernels: the types the object is compiled with, per
                                     # constraint ("any" for a constraint whose type the code ignores)

    @property
    def signature(self) -> str:
        return signature_name(self.types)

    @property
    def label(self) -> str:
        """How builds, size reports and size estimates name the object serving this
        signature: "float32", "float32,int64", or its instantiation ("uint64", "any")."""
        return self.suffix.replace("_", ",")

    @property
    def suffix(self) -> str:
        """Object-name and symbol suffix of the object that serves this signature:
        float32_int64; uint32_int64 for a kernel instantiated by element size."""
        return "_".join(self.instance or self.types)


@dataclass(frozen=True)
class OpEntry:
    op: str
    domain: str
    since_min: int
    since_max: int
    constraints: tuple[tuple[str, tuple[str, int]], ...]   # (name, ("input" | "output", index)), schema order
    source: str
    speed: bool
    requires: tuple[str, ...]
    constant_inputs: tuple[int, ...]
    kernels: dict[str, Kernel]   # signature name -> kernel
    attributes: dict[str, object]  # name -> "any" or list of allowed values
    path: Path
    # (input, output): the kernel may write that output into that input's memory
    in_place: tuple[int, int] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op)

    @property
    def type_constraint(self) -> str:
        """The constraint names, comma-joined ("T", "T,Tind")."""
        return ",".join(name for name, _ in self.constraints)

    def serves(self, since_version: int, signature: str) -> bool:
        return self.since_min <= since_version <= self.since_max and signature in self.kernels


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
    for key in ("op", "domain", "versions", "source"):
        if key not in d:
            _fail(path, f"missing required key '{key}'")
    if d["domain"] not in DOMAINS:
        _fail(path, f"domain '{d['domain']}' is not one of {sorted(DOMAINS)}")
    v = d["versions"]
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x >= 1 for x in v) and v[0] <= v[1]):
        _fail(path, "versions must be [min, max] since_versions, 1 <= min <= max")
    src = kernels_root / d["source"]
    if not src.is_file():
        _fail(path, f"source {d['source']} does not exist under kernels_src/")
    if "type_constraints" in d:
        constraints, kernels = _typed_kernels(path, d)
    else:
        constraints, kernels = _single_type_kernels(path, d)
    attrs = d.get("attributes") or {}
    if not isinstance(attrs, dict):
        _fail(path, "attributes must be a mapping")
    for name, allowed in attrs.items():
        if allowed != "any" and not isinstance(allowed, list):
            _fail(path, f"attributes.{name} must be 'any' or a list of allowed values")
    ci = d.get("constant_inputs") or []
    if not all(isinstance(i, int) and i >= 0 for i in ci):
        _fail(path, "constant_inputs must be a list of input indices")
    ip = d.get("in_place")
    if ip is not None:
        if not (isinstance(ip, dict) and set(ip) == {"input", "output"}
                and all(isinstance(ip[k], int) and not isinstance(ip[k], bool) and ip[k] >= 0 for k in ip)):
            _fail(path, "in_place must be {input: I, output: O}: the input whose memory output O may take")
        if ip["input"] in ci:
            _fail(path, f"in_place.input {ip['input']} is a constant input; its memory is read-only")
        ip = (ip["input"], ip["output"])
    return OpEntry(
        op=d["op"], domain=d["domain"], since_min=v[0], since_max=v[1],
        constraints=constraints, source=d["source"], speed=bool(d.get("speed", False)),
        requires=tuple(d.get("requires") or ()), constant_inputs=tuple(ci),
        kernels=kernels, attributes=attrs, path=path, in_place=ip,
    )


def _where(path: Path, name: str, value) -> tuple[str, int]:
    m = re.fullmatch(r"(input|output) (\d+)", str(value))
    if not m:
        _fail(path, f"type constraint {name}: where its type is read must be 'input N' or 'output N', not {value!r}")
    return (m.group(1), int(m.group(2)))


def _check_type(path: Path, where: str, dtype) -> str:
    if dtype not in DTYPES:
        _fail(path, f"{where}: unknown element type '{dtype}'; known: {sorted(DTYPES)} (minibuild/dtypes.py)")
    return dtype


def _single_type_kernels(path: Path, d: dict):
    """The one-constraint form: `type_constraint: T`, `type_from: input 0`, and per
    element type the kernel's own symbols (`types: {float32: {prepare, run}}`)."""
    for key in ("type_constraint", "type_from"):
        if key not in d:
            _fail(path, f"missing required key '{key}' (or give 'type_constraints' with 'symbols')")
    name = str(d["type_constraint"])
    constraints = ((name, _where(path, name, d["type_from"])),)
    if not isinstance(d.get("types"), dict) or not d["types"]:
        _fail(path, "types must map element types to {prepare, run}")
    kernels = {}
    for dtype, syms in d["types"].items():
        _check_type(path, "types", dtype)
        if not isinstance(syms, dict) or set(syms) != {"prepare", "run"}:
            _fail(path, f"types.{dtype} must have exactly 'prepare' and 'run'")
        for s in syms.values():
            if not C_IDENT.match(str(s)):
                _fail(path, f"types.{dtype}: '{s}' is not a C identifier")
        k = Kernel((dtype,), syms["prepare"], syms["run"])
        kernels[k.signature] = k
    return constraints, kernels


# How a constraint's element type reaches the compiled code (registry key `instantiate`):
# "type" compiles an object per element type; "size" one per element size, computing in
# the unsigned type of that size (copies, gathers, transposes: int64 and float64 share
# code); "any" one object whatever the type (the code never touches elements by type).
_MODES = ("type", "size", "any")


def _instance(dtype: str, mode: str) -> str:
    if mode == "size":
        return dtypes.BY_SIZE[dtypes.get(dtype).size]
    return "any" if mode == "any" else dtype


def _typed_kernels(path: Path, d: dict):
    """The type-family form: every type constraint of the op's schema with where its
    element type is read, one pair of symbol stems, and the signatures served, either
    as each constraint's types (every combination) or as an explicit list:

        type_constraints: {T: input 0, Tind: input 1}
        symbols: {prepare: mrt_gather_prepare, run: mrt_gather_run}
        types: {T: [float32, int64], Tind: [int32, int64]}     # or
        signatures: [[float32, int64], [int64, int64]]
        instantiate: {T: size}      # optional, per constraint or for all: type | size | any

    Each signature compiles the source once, with MRT_T<i> the C type of constraint i
    and MRT_KERNEL(stem) naming its symbols stem__<types> (runtime/mrt_kernel.h)."""
    tc = d["type_constraints"]
    if not isinstance(tc, dict) or not tc:
        _fail(path, "type_constraints must map each constraint name to 'input N' or 'output N'")
    if len(tc) > 4:
        _fail(path, "at most 4 type constraints (the runtime packs a signature into 32 bits)")
    if "type_constraint" in d or "type_from" in d:
        _fail(path, "give either type_constraints (with symbols) or type_constraint + type_from, not both")
    constraints = tuple((str(k), _where(path, k, v)) for k, v in tc.items())
    names = [n for n, _ in constraints]
    syms = d.get("symbols")
    if not isinstance(syms, dict) or set(syms) != {"prepare", "run"} or not all(C_IDENT.match(str(s)) for s in syms.values()):
        _fail(path, "symbols must be {prepare: <C identifier>, run: <C identifier>}: the stems of every instantiation")
    if "signatures" in d:
        sigs = d["signatures"]
        if not isinstance(sigs, list) or not sigs or not all(isinstance(s, list) and len(s) == len(names) for s in sigs):
            _fail(path, f"signatures must be a list of [{', '.join(names)}] type lists")
        signatures = [tuple(_check_type(path, "signatures", t) for t in s) for s in sigs]
    else:
        types = d.get("types")
        if not isinstance(types, dict) or set(types) != set(names):
            _fail(path, f"types must list the element types of each constraint: {', '.join(names)}")
        lists = [[_check_type(path, f"types.{n}", t) for t in (types[n] or [])] for n in names]
        signatures = list(itertools.product(*lists))
    kernels = {}
    modes = d.get("instantiate", "type")
    if isinstance(modes, str):
        modes = {n: modes for n in names}
    if not isinstance(modes, dict) or set(modes) - set(names) or not set(modes.values()) <= set(_MODES):
        _fail(path, f"instantiate must be one of {', '.join(_MODES)}, or map constraints ({', '.join(names)}) to one")
    for sig in signatures:
        inst = tuple(_instance(t, modes.get(n, "type")) for n, t in zip(names, sig))
        suffix = "_".join(inst)
        k = Kernel(tuple(sig), f"{syms['prepare']}__{suffix}", f"{syms['run']}__{suffix}", family=True, instance=inst)
        if k.signature in kernels:
            _fail(path, f"signature {k.signature} is listed twice")
        kernels[k.signature] = k
    if not kernels:
        _fail(path, "no type signature is served")
    return constraints, kernels


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
        # Signatures of one entry instantiated by size or for any type share an object
        # and so its symbols; no two objects may define the same one.
        objects = {(k.prepare, k.run): k.suffix for k in e.kernels.values()}
        for (prepare, run), suffix in sorted(objects.items()):
            for s in (prepare, run):
                if s in symbols:
                    _fail(e.path, f"symbol {s} is already used by {symbols[s]}")
                symbols[s] = f"{e.path.name} ({suffix})"
    return reg

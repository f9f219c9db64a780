"""Scan: load every model of a folder, optimise it, and collect what each node needs."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import onnx

from . import domains, optimize
from .errors import ModelError
from .registry import DTYPE_BY_ONNX, Registry


@dataclass
class ScannedModel:
    path: Path
    name: str
    sha256: str
    graph: optimize.Graph


@dataclass(frozen=True)
class NodeNeed:
    """One node's request to the runtime: the manifest is the union of these."""

    model: str
    node: str
    domain: str    # "ai.onnx" or "ai.minibuild"
    op: str
    opset: int     # the operator's since_version
    types: tuple[str, ...]        # its type signature: one element type per type constraint of the kernel
    constraints: tuple[str, ...]  # the constraint names ("T",) / ("T", "Tind"), in the registry's order
    where: tuple[tuple[str, int], ...] = ()  # where each constraint's type is read: ("input" | "output", index)
    origins: tuple[tuple[str, str], ...] = ()  # (rewrite, original "Op name") a build-time rewrite made it from
    in_place: tuple[int, int] | None = None  # the registry's (input, output) the output may share memory with

    @property
    def signature(self) -> str:
        """"float32" / "float32,int64": the key of the kernel this node asks for."""
        return ",".join(self.types)

    @property
    def dtype(self) -> str:
        return self.signature

    @property
    def type_constraint(self) -> str:
        return ",".join(self.constraints)

    @property
    def types_label(self) -> str:
        """How messages name the signature: "type float32" / "types T=float32, Tind=int64"."""
        if len(self.types) == 1:
            return f"type {self.types[0]}"
        return "types " + ", ".join(f"{c}={t}" for c, t in zip(self.constraints, self.types))


def find_models(models_dir: Path, files: list[Path] | None = None) -> list[Path]:
    """Every .onnx file under `models_dir` (or exactly `files`, all inside it, when a
    workspace glob chose them), with unique names."""
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise ModelError(f"{models_dir}: not a folder; pass the folder holding your .onnx files with --models")
    if files is not None:
        outside = [str(f) for f in files if models_dir.resolve() not in Path(f).resolve().parents]
        if outside:
            raise ModelError(f"{', '.join(outside)}: not inside the models folder {models_dir}")
    paths = sorted(Path(p) for p in files) if files is not None else sorted(p for p in models_dir.rglob("*.onnx") if p.is_file())
    if not paths:
        raise ModelError(f"{models_dir}: no .onnx files found")
    names = {}
    for p in paths:
        if p.stem in names:
            raise ModelError(f"{p}: two models are named '{p.stem}' ({names[p.stem]}); model names must be unique")
        names[p.stem] = p
    return paths


def load_model(path: Path, fixed_dims=None, input_shapes=None, root=None) -> tuple[optimize.Graph, str]:
    """Read, check and give static shapes to one model file. External data is read
    from inside `root` only (the models folder; default: the model's own folder)."""
    model, digest = read_model(path, root)
    return graph_from_proto(model, str(path), fixed_dims, input_shapes), digest


# --- reading a model file and its external data ------------------------------------
#
# torch.onnx.export (and onnx.save_model(save_as_external_data=True)) write the
# weights to a file beside the model; each tensor names it by a `location`
# relative to the model's folder, with an `offset` and `length`. A model is
# untrusted input, so every location is checked here before anything is opened:
# only regular files inside the models folder are ever read, and only the bytes the
# tensor's type and dims call for.

# Element types stored in fewer than 8 bits, packed: bits per element.
_PACKED_BITS = {getattr(onnx.TensorProto, n): b for n, b in (
    ("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("UINT2", 2), ("INT2", 2), ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6))
    if hasattr(onnx.TensorProto, n)}


def read_model(path: Path, root: Path | None = None) -> tuple[onnx.ModelProto, str]:
    """The model of one .onnx file with all its external data read in, and a digest
    of the model and every byte of weights it uses. Raises ModelError naming the
    file, the tensor and the location for anything that cannot be read safely."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"{path}: cannot read the model: {e.strerror or e}") from None
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception as e:
        raise ModelError(f"{path}: not a valid ONNX model (the protobuf does not parse: {e})") from None
    _check_utf8(model, path)
    digest = hashlib.sha256(data)
    _ExternalData(path, Path(root) if root is not None else path.parent).load_into(model, digest)
    return model, digest.hexdigest()


def _check_utf8(message, path: Path, where: str = "model"):
    """Protobuf hands a `string` field that is not UTF-8 back as bytes, which no
    later step expects (names are compared and sorted as str): refuse it here."""
    from google.protobuf.descriptor import FieldDescriptor
    for field, value in message.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if repeated else [value]
            for k, item in enumerate(items):
                _check_utf8(item, path, f"{where}.{field.name}[{k}]" if repeated else f"{where}.{field.name}")
        elif field.type == FieldDescriptor.TYPE_STRING:
            for v in (value if repeated else [value]):
                if isinstance(v, bytes):
                    raise ModelError(f"{path}: not a valid ONNX model: {where}.{field.name} is not valid UTF-8 "
                                     f"({v[:40]!r})")


def _all_tensors(model: onnx.ModelProto):
    """Every TensorProto of a model: initializers, sparse initializers, tensor-valued
    attributes (Constant), in subgraphs and local functions too."""
    def of_graph(g):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        for n in g.node:
            yield from of_node(n)

    def of_node(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for s in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                yield s.values
                yield s.indices
            if a.HasField("g"):
                yield from of_graph(a.g)
            for sub in a.graphs:
                yield from of_graph(sub)

    yield from of_graph(model.graph)
    for f in model.functions:
        for n in f.node:
            yield from of_node(n)


class _ExternalData:
    def __init__(self, model_path: Path, root: Path):
        self.model_path = model_path
        self.model_dir = model_path.parent
        self.root = root
        self.root_real = os.path.realpath(root)
        self.files = {}  # real path -> (fd, size)

    def fail(self, tensor, location, why: str):
        loc = f" location '{location}'" if location is not None else ""
        raise ModelError(f"{self.model_path}: tensor '{tensor.name}': external data{loc} {why}")

    def load_into(self, model: onnx.ModelProto, digest):
        try:
            for t in _all_tensors(model):
                if t.data_location == onnx.TensorProto.EXTERNAL:
                    data = self.read(t)
                    t.raw_data = data
                    t.data_location = onnx.TensorProto.DEFAULT
                    del t.external_data[:]
                    digest.update(data)
        finally:
            for fd, _ in self.files.values():
                os.close(fd)

    def resolve(self, t, location: str) -> str:
        """The real path of a location, refused unless it is a file inside the root."""
        hint = (f"; external data must be a file inside the models folder {self.root}, named relative to the "
                "model's own folder (re-save it with onnx.save_model(..., save_as_external_data=True, "
                "location='NAME.onnx.data'))")
        if not location:
            self.fail(t, location, "has no location" + hint)
        if not isinstance(location, str):  # protobuf hands invalid UTF-8 back as bytes
            self.fail(t, location, "is not valid UTF-8" + hint)
        if "\0" in location:
            self.fail(t, location, "contains a NUL character" + hint)
        if os.path.isabs(location) or location.startswith(("/", "\\")) or PureWindowsPath(location).drive:
            self.fail(t, location, "is an absolute path" + hint)
        if ".." in location.replace("\\", "/").split("/"):
            self.fail(t, location, "goes up a folder ('..')" + hint)
        real = os.path.realpath(os.path.join(self.model_dir, location))
        if os.path.commonpath([real, self.root_real]) != self.root_real:
            self.fail(t, location, f"resolves (through a symlink) to {real}, outside the models folder" + hint)
        return real

    def open(self, t, location: str, real: str):
        if real not in self.files:
            try:
                fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                             | getattr(os, "O_NONBLOCK", 0))
            except FileNotFoundError:
                self.fail(t, location, f"does not exist (looked for {real}); copy the data file beside the model")
            except OSError as e:
                self.fail(t, location, f"cannot be opened: {e.strerror or e}")
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                self.fail(t, location, "is not a regular file")
            self.files[real] = (fd, st.st_size)
        return self.files[real]

    def read(self, t) -> bytes:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location")
        real = self.resolve(t, location)
        expected = self.nbytes(t, location)
        offset = self.number(t, location, info, "offset", 0)
        length = self.number(t, location, info, "length", None)
        fd, size = self.open(t, location, real)
        if length is None:
            length = max(size - offset, 0)
        if length != expected:
            self.fail(t, location, f"holds {length} bytes but the tensor needs {expected} "
                      f"({onnx.TensorProto.DataType.Name(t.data_type)} {list(t.dims)})")
        if offset + length > size:
            self.fail(t, location, f"bytes {offset}..{offset + length} lie past the end of the file ({size} bytes)")
        chunks, done = [], 0
        while done < length:
            chunk = os.pread(fd, length - done, offset + done)
            if not chunk:
                self.fail(t, location, "ended while being read")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def number(self, t, location, info, key, default):
        if key not in info:
            return default
        value = info[key]
        if not isinstance(value, str) or not value.isascii() or not value.isdigit():
            self.fail(t, location, f"has {key} '{value}': not a byte count")
        return int(value)

    def nbytes(self, t, location) -> int:
        if t.data_type == onnx.TensorProto.STRING:
            self.fail(t, location, "holds strings: ONNX stores string tensors inline only")
        try:
            bits = _PACKED_BITS.get(t.data_type) or onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize * 8
        except Exception:
            self.fail(t, location, f"has unknown element type {t.data_type}")
        if any(d < 0 for d in t.dims):
            self.fail(t, location, f"has negative dims {list(t.dims)}")
        return (math.prod(t.dims) * bits + 7) // 8


def graph_from_proto(model: onnx.ModelProto, source: str, fixed_dims=None, input_shapes=None) -> optimize.Graph:
    """Check a loaded model against the ONNX spec and give it static shapes: the one
    entry every model takes, whether read from a file or made in memory."""
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelError(f"{source}: not a valid ONNX model: {e}") from None
    return optimize.from_model(model, source, fixed_dims, input_shapes)


def scan_model(path: Path, registry: Registry, fixed_dims=None, input_shapes=None, root=None) -> ScannedModel:
    """`root`: the models folder, the only place external data is read from
    (default: the model's own folder)."""
    graph, digest = load_model(path, fixed_dims, input_shapes, root)
    return optimise_graph(graph, Path(path), registry, digest)


def optimise_graph(graph: optimize.Graph, path: Path, registry: Registry, sha256: str = "") -> ScannedModel:
    """Every build-time rewrite, with the registry's operators as the ones available."""
    optimize.optimize(graph, set(registry.ops))
    return ScannedModel(path=Path(path), name=Path(path).stem, sha256=sha256, graph=graph)


def value_dtype(graph: optimize.Graph, node, where: tuple[str, int]) -> str:
    """Element type of the node's input or output `where` = ("input" | "output", index)."""
    kind, idx = where
    names = node.input if kind == "input" else node.output
    if idx >= len(names) or not names[idx]:
        return "undefined"
    elem = graph.value_info.get(names[idx], (0, None))[0]
    return DTYPE_BY_ONNX.get(elem, onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "undefined")


def needs(model: ScannedModel, registry: Registry) -> list[NodeNeed]:
    """Per node: the kernel it asks for, with its full type signature (each of the
    registry entry's type constraints read where the entry says; input 0 for an op
    the registry lacks, which select then reports)."""
    out = []
    g = model.graph
    for node in g.nodes:
        domain = domains.canonical(node.domain)
        entry = registry.get(domain, node.op_type)
        constraints = entry.constraints if entry else (("T", ("input", 0)),)
        out.append(NodeNeed(
            model=model.name, node=node.name, domain=domain, op=node.op_type,
            opset=optimize.since_version(g, node),
            types=tuple(value_dtype(g, node, where) for _, where in constraints),
            constraints=tuple(name for name, _ in constraints),
            where=tuple(w for _, w in constraints),
            origins=tuple(g.origins.get(node.name, ())),
            in_place=entry.in_place if entry else None,
        ))
    return out

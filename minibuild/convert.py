"""Convert an optimised graph to minirt's compact model format (docs/model_format.md):
static shapes, the memory plan, weights aligned for SIMD, a checksum."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, helper

from . import domains, dtypes
from .errors import ModelError
from .optimize import Graph
from .registry import DTYPES, signature_key
from .scan import NodeNeed

MAGIC = b"MRTM"
VERSION = (1, 0)
HEADER = struct.Struct("<4sHHIIQQIIIIIIIIIIIIQQ")
TENSOR = struct.Struct("<IIII6qQQQ")
NODE = struct.Struct("<12I")
ATTR = struct.Struct("<IIIIQ")
NO_INDEX = 0xFFFFFFFF
ALIGN = 64
MAX_DIMS = 6
ELEM_SIZE = {t.onnx: t.size for t in dtypes.TABLE}
# Nodes whose output can share its input's memory: they only relabel the shape.
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}

assert HEADER.size == 96 and TENSOR.size == 88 and NODE.size == 48 and ATTR.size == 24


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _Strings:
    def __init__(self):
        self.buf = bytearray(b"\0")
        self.index = {"": 0}

    def add(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.buf)
            self.buf += s.encode() + b"\0"
        return self.index[s]


class _Data:
    def __init__(self):
        self.buf = bytearray()
        self.dedup = {}

    def add(self, raw: bytes, align: int) -> int:
        key = (raw, align)
        if key in self.dedup:
            return self.dedup[key]
        off = _align(len(self.buf), align)
        self.buf += b"\0" * (off - len(self.buf)) + raw
        self.dedup[key] = off
        return off


@dataclass
class Plan:
    arena_size: int
    offsets: dict          # activation name -> arena offset
    aliases: int           # how many view outputs share their input's memory
    in_place: int = 0      # how many outputs took a dying input's memory (registry in_place)


def plan_memory(g: Graph, sizes: dict[str, int], in_place: list | None = None) -> Plan:
    """Greedy best-offset placement by decreasing size over lifetime intervals.
    Graph inputs live for the whole run (a caller may run twice on one input).
    in_place[i] is None or node i's registry (input, output) pair: that output
    takes the input's memory where the input dies at node i (see _may_share)."""
    n = len(g.nodes)
    root = {}

    def find(x):
        while root.get(x, x) != x:
            x = root[x]
        return x

    def share(dst, src):
        """dst lives in src's memory: one lifetime, src's."""
        root[dst] = src
        end[src] = max(end[src], end.pop(dst))
        start.pop(dst)

    start, end = {}, {}
    for vi in g.inputs:
        start[vi.name], end[vi.name] = -1, n
    aliases = 0
    for i, node in enumerate(g.nodes):
        for name in node.input:
            if name and name not in g.consts:
                end[find(name)] = max(end.get(find(name), i), i)
        for name in node.output:
            if not name:
                continue
            start.setdefault(name, i)
            end.setdefault(name, i)
        if node.op_type in VIEW_OPS and node.domain == "" and node.input[0] not in g.consts:
            src, dst = find(node.input[0]), node.output[0]
            if sizes.get(src) == sizes.get(dst):
                share(dst, src)
                aliases += 1
    for vi in g.outputs:
        end[find(vi.name)] = n
    # end[] of names that became aliases later must move to their roots
    for name in list(end):
        r = find(name)
        if r != name:
            end[r] = max(end[r], end.pop(name))
    shared = 0
    outputs = {find(vi.name) for vi in g.outputs}
    for i, (node, pair) in enumerate(zip(g.nodes, in_place or [])):
        if pair and _may_share(g, node, i, pair, sizes, find, start, end, outputs):
            share(node.output[pair[1]], find(node.input[pair[0]]))
            shared += 1
    groups = sorted(start, key=lambda k: (-_align(sizes[k], ALIGN), start[k], k))
    placed = []  # (offset, size, start, end)
    offsets = {}
    for name in groups:
        size = _align(max(sizes[name], 1), ALIGN)
        s, e = start[name], end[name]
        live = sorted((o, sz) for o, sz, ps, pe in placed if not (pe < s or e < ps))
        off = 0
        for o, sz in live:
            if off + size <= o:
                break
            off = max(off, o + sz)
        placed.append((off, size, s, e))
        offsets[name] = off
    arena = max((o + sz for o, sz, _, _ in placed), default=0)
    for name in list(root):
        offsets[name] = offsets[find(name)]
    return Plan(arena_size=arena, offsets=offsets, aliases=aliases, in_place=shared)


def _may_share(g: Graph, node, i: int, pair: tuple[int, int], sizes: dict[str, int], find, start, end,
               outputs) -> bool:
    """Whether node i's output pair[1] may take input pair[0]'s memory: the input's
    memory (with every view of it) is last read at node i, is no graph input,
    output or constant, is read by no other input of the node, and has the
    output's byte size; the output is no graph output and has no memory of its own yet."""
    ii, oi = pair
    if ii >= len(node.input) or oi >= len(node.output):
        return False
    name, dst = node.input[ii], node.output[oi]
    if not name or not dst or name in g.consts or dst not in start or find(dst) != dst:
        return False
    src = find(name)
    if src not in start or start[src] < 0 or end[src] != i or src in outputs or find(dst) in outputs:
        return False
    if any(n and n not in g.consts and find(n) == src for k, n in enumerate(node.input) if k != ii):
        return False
    return sizes.get(src) == sizes.get(dst)


def _attr_record(a, strings: _Strings, data: _Data, where: str):
    t = a.type
    if t == AttributeProto.FLOAT:
        return (strings.add(a.name), 1, 1, 0, data.add(struct.pack("<f", a.f), 8))
    if t == AttributeProto.INT:
        return (strings.add(a.name), 2, 1, 0, data.add(struct.pack("<q", a.i), 8))
    if t == AttributeProto.STRING:
        return (strings.add(a.name), 3, len(a.s), 0, data.add(bytes(a.s) or b"\0", 8))
    if t == AttributeProto.FLOATS:
        return (strings.add(a.name), 6, len(a.floats), 0, data.add(np.asarray(a.floats, "<f4").tobytes() or b"\0", 8))
    if t == AttributeProto.INTS:
        return (strings.add(a.name), 7, len(a.ints), 0, data.add(np.asarray(a.ints, "<i8").tobytes() or b"\0", 8))
    raise ModelError(f"{where}: attribute '{a.name}' of type {AttributeProto.AttributeType.Name(t)} "
                     "cannot be stored in a minirt model; it must be folded away at build time")


def _types_key(types: tuple[str, ...]) -> int:
    """The node's type signature as the runtime matches it (0 when a type has no
    minirt value: select has already refused such a node)."""
    return signature_key(types) if all(t in DTYPES for t in types) else 0


def convert(g: Graph, node_needs: list[NodeNeed]) -> bytes:
    if len(node_needs) != len(g.nodes):
        raise ValueError("node_needs must match the graph's nodes")
    strings, data = _Strings(), _Data()

    # Tensors in first-use order: graph inputs, then everything nodes touch.
    order: list[str] = []
    seen = set()
    for name in [vi.name for vi in g.inputs] + [n for node in g.nodes for n in list(node.input) + list(node.output)] + [vi.name for vi in g.outputs]:
        if name and name not in seen:
            seen.add(name)
            order.append(name)
    index = {name: i for i, name in enumerate(order)}

    shapes, dtypes, sizes = {}, {}, {}
    for name in order:
        if name in g.consts:
            arr = g.consts[name]
            elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
            shape = tuple(arr.shape)
        else:
            elem, shape = g.value_info.get(name, (0, None))
        if elem not in ELEM_SIZE:
            raise ModelError(f"{g.source}: tensor '{name}' has element type {elem}, which minirt's format does not store")
        if shape is None or len(shape) > MAX_DIMS:
            raise ModelError(f"{g.source}: tensor '{name}' has shape {shape}; minirt needs static shapes of at most {MAX_DIMS} dims")
        shapes[name], dtypes[name] = shape, elem
        sizes[name] = int(np.prod(shape, dtype=np.int64)) * ELEM_SIZE[elem]

    plan = plan_memory(g, {k: v for k, v in sizes.items() if k not in g.consts},
                       [need.in_place for need in node_needs])

    tensors = bytearray()
    for name in order:
        shape = list(shapes[name]) + [0] * (MAX_DIMS - len(shapes[name]))
        if name in g.consts:
            raw = np.ascontiguousarray(g.consts[name]).astype(g.consts[name].dtype.newbyteorder("<")).tobytes()
            kind, off = 1, data.add(raw or b"\0", ALIGN)
        else:
            kind, off = 0, plan.offsets[name]
        tensors += TENSOR.pack(strings.add(name), dtypes[name], len(shapes[name]), kind, *shape, off, sizes[name], 0)

    indices = [index[vi.name] for vi in g.inputs] + [index[vi.name] for vi in g.outputs]
    nodes, attrs = bytearray(), bytearray()
    n_attrs = 0
    for node, need in zip(g.nodes, node_needs):
        ins_first = len(indices)
        indices += [index[n] if n else NO_INDEX for n in node.input]
        outs_first = len(indices)
        indices += [index[n] for n in node.output if n]
        where = f"{g.source}: node '{node.name}' ({node.op_type})"
        first_attr = n_attrs
        for a in sorted(node.attribute, key=lambda a: a.name):
            attrs += ATTR.pack(*_attr_record(a, strings, data, where))
            n_attrs += 1
        nodes += NODE.pack(
            strings.add(node.op_type), strings.add(domains.proto(node.domain)),
            strings.add(node.name), need.opset, _types_key(need.types),
            ins_first, len(node.input), outs_first, len([o for o in node.output if o]),
            first_attr, len(node.attribute), 0,
        )

    idx_bytes = struct.pack(f"<{len(indices)}I", *indices)
    layout = {}
    pos = HEADER.size
    for key, blob in (("tensors", tensors), ("nodes", nodes), ("attrs", attrs), ("indices", idx_bytes), ("strings", strings.buf)):
        layout[key] = pos
        pos = _align(pos + len(blob), 8)
    data_off = _align(pos, ALIGN)
    body = bytearray(data_off - HEADER.size)
    for key, blob in (("tensors", tensors), ("nodes", nodes), ("attrs", attrs), ("indices", idx_bytes), ("strings", strings.buf)):
        start = layout[key] - HEADER.size
        body[start:start + len(blob)] = blob
    body += data.buf
    file_size = HEADER.size + len(body)
    header = HEADER.pack(
        MAGIC, VERSION[0], VERSION[1], HEADER.size, zlib.crc32(body) & 0xFFFFFFFF, file_size, plan.arena_size,
        len(order), len(g.nodes), n_attrs, len(indices), len(g.inputs), len(g.outputs),
        layout["tensors"], layout["nodes"], layout["attrs"], layout["indices"], layout["strings"], len(strings.buf),
        data_off, len(data.buf),
    )
    return bytes(header + body)

"""Where every byte of a built library went.

For one TargetBuild this reads the stripped deliverable, its unstripped twin (for
symbols), every object the build compiled (for who defines what) and, when it can
get one, the linker map; and splits the deliverable's file size, byte for byte,
into:

- components: the objects of the build (runtime core, kernels, support units, the
  generated registry / bindings), each with bytes per section;
- shared: merged constants (strings, literals) that several objects contributed;
- overhead: named linker/loader/file-format bytes (headers, .dynsym, relocations,
  PLT/GOT, alignment padding, ...);
- unattributed: bytes none of the above explains, per section, never spread.

The parts sum to the deliverable's size exactly (`check`).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import binfmt, linkmap, sections as sections_mod

# Linker-made sections inside loaded segments: overhead, not anyone's code.
_SYNTHETIC = {".plt", ".got", ".got.plt", ".plt.got", ".plt.sec", ".iplt", ".igot.plt", ".eh_frame_hdr",
              ".dynamic", ".interp", "__TEXT,__stubs", "__TEXT,__stub_helper", "__DATA,__la_symbol_ptr",
              "__DATA,__nl_symbol_ptr", "__DATA_CONST,__got", "__DATA,__got", "__TEXT,__unwind_info",
              "__TEXT,__eh_frame", "__TEXT,__auth_stubs", "__DATA_CONST,__auth_got"}
_PAD_BYTES = {0x00, 0xCC, 0x90}


def overhead_category(name: str) -> str:
    n = name[len("object "):] if name.startswith("object ") and name != "object file padding" else name
    if name.startswith("object ") and n.startswith("Mach-O header"):
        return "object file headers"
    if n in ("ELF header", "program headers", "section header table") or n.startswith("Mach-O header"):
        return "headers"
    if n in (".dynsym", ".dynstr", ".gnu.version", ".gnu.version_r", ".gnu.version_d"):
        return "dynamic symbols"
    if n in (".hash", ".gnu.hash"):
        return "symbol hash tables"
    if n.startswith((".rela", ".rel.", ".relr", "relocations")) or n in (".rel.dyn", ".rel.plt"):
        return "relocations"
    if n in _SYNTHETIC and n not in (".dynamic", ".eh_frame_hdr", "__TEXT,__unwind_info", "__TEXT,__eh_frame"):
        return "PLT/GOT"
    if n == ".dynamic" or n.startswith("__LINKEDIT"):
        return "dynamic linking"
    if n.startswith(".note"):
        return "notes"
    if "padding" in n:
        return "padding"
    if n.startswith("archive") or n.startswith("ar "):
        return "archive structure"
    if n.startswith((".debug", "__DWARF", "debug")):
        return "debug info"
    if n in ("symbol table", "string table", ".symtab", ".strtab"):
        return "symbol tables"
    if n.startswith("linker-made") or n.startswith("unwind") or n in (".eh_frame_hdr", "__TEXT,__unwind_info", "__TEXT,__eh_frame"):
        return "linker-made data"
    return "file metadata"


@dataclass
class Component:
    id: str
    kind: str                 # kernel | support | runtime | registry | bindings | other | external | shared
    name: str
    op: str | None = None
    dtype: str | None = None
    objects: list[str] = field(default_factory=list)
    sections: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    items: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # symbol / input section -> bytes
    member_bytes: int = 0     # archives: the whole member, headers and tables included

    @property
    def bytes(self) -> int:
        return sum(self.sections.values())


def component_for_role(obj: str, role: tuple) -> Component:
    kind = role[0] if role else "other"
    if kind == "kernel":
        op, dtype = role[1], role[2]
        short = op[len("ai.onnx."):] if op.startswith("ai.onnx.") else op
        return Component(obj, "kernel", f"{short} {dtype}", op=op, dtype=dtype, objects=[obj])
    if kind == "runtime":
        return Component(obj, "runtime", f"runtime/{role[1]}", objects=[obj])
    if kind == "support":
        return Component(obj, "support", f"support/{role[1]}", objects=[obj])
    if kind == "registry":
        return Component(obj, "registry", "registry (generated)", objects=[obj])
    if kind in ("bindings", "jni", "glue", "binding"):
        return Component(obj, "bindings", f"bindings/{role[1] if len(role) > 1 else Path(obj).stem}", objects=[obj])
    return Component(obj, "other", f"{kind}/{role[1] if len(role) > 1 else Path(obj).stem}", objects=[obj])


class Ledger:
    def __init__(self):
        self.components: dict[str, Component] = {}
        self.overhead: dict[str, int] = defaultdict(int)
        self.unattributed: dict[str, int] = defaultdict(int)
        self.section_owners: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.notes: list[str] = []
        self.warnings: list[str] = []  # also in notes; printed on the console by the report
        # Alignment padding in front of an object's input section: it goes when the object goes.
        self.padding_of: dict[str, int] = defaultdict(int)

    def warn(self, message: str):
        self.notes.append(message)
        self.warnings.append(message)

    def give(self, comp: Component, section: str, n: int, item: str | None = None):
        if n <= 0:
            return
        c = self.components.setdefault(comp.id, comp)
        c.sections[section] += n
        if item:
            c.items[item] += n
        self.section_owners[section][comp.id] += n

    def over(self, name: str, n: int, section: str | None = None):
        if n <= 0:
            return
        self.overhead[name] += n
        if section:
            self.section_owners[section]["overhead:" + name] += n

    def lost(self, section: str, n: int):
        if n <= 0:
            return
        self.unattributed[section] += n
        self.section_owners[section]["unattributed"] += n


class _Objects:
    """The build's objects: their roles, defined symbols and merged constants."""

    def __init__(self, tb_dir: Path, roles: dict):
        self.comp: dict[str, Component] = {}
        self.info: dict[str, binfmt.ObjectInfo] = {}
        self.by_abs: dict[str, str] = {}
        self.by_hash: dict[str, str] = {}
        self.by_base: dict[str, list[str]] = defaultdict(list)
        self.defs: dict[str, list[tuple[str, str, int]]] = defaultdict(list)   # sym -> [(obj, section, size)]
        for rel, role in sorted(roles.items()):
            p = Path(tb_dir) / rel
            self.comp[rel] = component_for_role(rel, tuple(role))
            self.by_abs[os.path.normpath(str(p))] = rel
            self.by_base[p.name].append(rel)
            if not p.is_file():
                continue
            data = p.read_bytes()
            self.by_hash[hashlib.sha256(data).hexdigest()] = rel
            try:
                info = binfmt.object_info(p, data)
            except (binfmt.FormatError, Exception):  # an object we cannot read is reported, not fatal
                continue
            self.info[rel] = info
            for name, defs in info.defined.items():
                for sec, size in defs:
                    self.defs[name].append((rel, sec, size))

    def paths(self) -> dict[str, Path]:
        return {rel: Path(p) for p, rel in self.by_abs.items()}

    def lookup_file(self, path: str) -> str | None:
        if path in self.comp:
            return path
        n = os.path.normpath(path)
        if n in self.by_abs:
            return self.by_abs[n]
        for rel in self.comp:
            if n.endswith(os.sep + rel) or n == rel:
                return rel
        return None

    def owner_of_symbol(self, name: str, size: int) -> tuple[str | None, list[str]]:
        """(object, candidates): a unique definer, else the one whose size matches, else None."""
        cands = self.defs.get(name) or []
        objs = sorted({c[0] for c in cands})
        if len(objs) == 1:
            return objs[0], objs
        if not objs:
            return None, []
        same = sorted({c[0] for c in cands if c[2] == size})
        if len(same) == 1:
            return same[0], objs
        return None, objs

    def owners_of_string(self, s: bytes) -> list[str]:
        return sorted(rel for rel, info in self.info.items() if s in info.strings)

    def owners_of_literal(self, s: bytes) -> list[str]:
        return sorted(rel for rel, info in self.info.items() if s in info.literals.get(len(s), ()))

    def shared(self, rels: list[str]) -> Component:
        names = [self.comp[r].name for r in rels]
        return Component("shared:" + "+".join(rels), "shared", "shared: " + ", ".join(names), objects=list(rels))


def _split_merged(ledger: Ledger, objs: _Objects, img: binfmt.Image, sec: binfmt.Section, start: int, size: int,
                  kind: str, entsize: int, section_name: str) -> None:
    """Merged constants: each string/literal goes to the object(s) that carry it."""
    blob = img.bytes_at(sec, start, size)
    if len(blob) < size:
        ledger.lost(section_name, size)
        return
    pos = 0
    while pos < size:
        if kind == "strings":
            end = blob.find(b"\0", pos)
            end = size if end < 0 else end + 1
            piece = blob[pos:end]
            owners = objs.owners_of_string(piece)
            if not owners and piece.strip(b"\0") == b"":
                ledger.over(f"padding in {section_name}", len(piece), section_name)
                pos = end
                continue
        else:
            end = min(size, pos + entsize)
            piece = blob[pos:end]
            owners = objs.owners_of_literal(piece)
        if len(owners) == 1:
            ledger.give(objs.comp[owners[0]], section_name, len(piece), "merged constants")
        elif owners:
            ledger.give(objs.shared(owners), section_name, len(piece), "merged constants")
        else:
            ledger.lost(section_name, len(piece))
        pos = end


def _merge_kind(input_section: str) -> tuple[str, int] | None:
    if ".str" in input_section or input_section.endswith("__cstring"):
        return "strings", 1
    for n in (4, 8, 16, 32):
        if input_section.endswith(f".cst{n}") or input_section.endswith(f"__literal{n}"):
            return "literals", n
    return None


def _is_padding(blob: bytes) -> bool:
    return all(b in _PAD_BYTES for b in blob) or (len(blob) % 4 == 0 and blob == b"\x1f\x20\x03\xd5" * (len(blob) // 4))


def _attribute_section_by_map(ledger: Ledger, objs: _Objects, img: binfmt.Image, sec: binfmt.Section,
                              osec: linkmap.OutputSection) -> None:
    cursor = sec.addr
    end_of_sec = sec.addr + sec.size
    for isec in sorted(osec.inputs, key=lambda i: i.addr):
        rel = objs.lookup_file(isec.file) if isec.file != "<internal>" else None
        if isec.addr > cursor:
            gap = isec.addr - cursor
            if gap < max(isec.align, 16):
                ledger.over(f"padding in {sec.name}", gap, sec.name)
                if rel is not None:
                    ledger.padding_of[rel] += gap
            else:
                ledger.lost(sec.name, gap)
        start = max(isec.addr, cursor)
        size = isec.addr + isec.size - start
        if size <= 0:
            continue
        mk = _merge_kind(isec.section)
        if isec.file == "<internal>" and mk:
            _split_merged(ledger, objs, img, sec, start, size, mk[0], mk[1], sec.name)
        elif isec.file == "<internal>":
            ledger.over(f"linker-made {isec.section}", size, sec.name)
        elif rel is not None:
            label = isec.symbols[0][0] if len(isec.symbols) == 1 else isec.section
            ledger.give(objs.comp[rel], sec.name, size, label)
        else:
            path, member = isec.file.partition("(")[::2]
            base = Path(path).name  # no folder of this machine goes into the report
            ledger.give(Component("external:" + base, "external", base,
                                  objects=[base + (f"({member}" if member else "")]), sec.name, size, isec.section)
        cursor = start + size
    if end_of_sec > cursor:
        gap = end_of_sec - cursor
        (ledger.over(f"padding in {sec.name}", gap, sec.name) if gap < 16 else ledger.lost(sec.name, gap))


def _attribute_section_by_symbols(ledger: Ledger, objs: _Objects, img: binfmt.Image, sec: binfmt.Section,
                                  symbols: list[binfmt.Symbol]) -> None:
    cursor = sec.addr
    end_of_sec = sec.addr + sec.size

    def gap(a: int, b: int):
        if b <= a:
            return
        blob = img.bytes_at(sec, a, b - a)
        if b - a < max(sec.align, 16) and _is_padding(blob):
            ledger.over(f"padding in {sec.name}", b - a, sec.name)
        elif blob and sec.kind == "rodata":
            _split_merged(ledger, objs, img, sec, a, b - a, "strings", 1, sec.name)
        else:
            ledger.lost(sec.name, b - a)

    for s in sorted(symbols, key=lambda s: (s.addr, -s.size)):
        if s.addr + s.size <= cursor:
            continue  # an alias of bytes already counted
        gap(cursor, s.addr)
        start = max(s.addr, cursor)
        size = min(s.addr + s.size, end_of_sec) - start
        owner, cands = objs.owner_of_symbol(s.name, s.size)
        if owner:
            ledger.give(objs.comp[owner], sec.name, size, s.name)
        elif cands:
            ledger.give(objs.shared(cands), sec.name, size, s.name)
        else:
            ledger.give(Component("external:?", "external", "not from this build's objects"), sec.name, size, s.name)
        cursor = start + size
    gap(cursor, end_of_sec)


def _cover(file_size: int, ranges: list[tuple[int, int, object]]) -> list[tuple[int, int, object]]:
    """Assign each file byte to the first range (in list order) that claims it;
    returns (offset, size, tag) pieces actually assigned, plus (offset, size, None) gaps."""
    taken: list[tuple[int, int]] = []
    pieces = []
    for off, size, tag in ranges:
        if size <= 0:
            continue
        segs = [(max(0, off), min(file_size, off + size))]
        for a, b in taken:
            nxt = []
            for s, e in segs:
                if e <= a or s >= b:
                    nxt.append((s, e))
                else:
                    if s < a:
                        nxt.append((s, a))
                    if e > b:
                        nxt.append((b, e))
            segs = nxt
        for s, e in segs:
            if e > s:
                pieces.append((s, e - s, tag))
                taken.append((s, e))
    taken.sort()
    cursor = 0
    for a, b in taken:
        if a > cursor:
            pieces.append((cursor, a - cursor, None))
        cursor = max(cursor, b)
    if cursor < file_size:
        pieces.append((cursor, file_size - cursor, None))
    return pieces


@dataclass
class LinkCosts:
    """Bytes outside the objects that follow them in and out of a link (see marginal.py)."""
    registry_row: float = 0.0       # one kernel-table row: its bytes + its dynamic relocations
    op_names: dict[str, int] = field(default_factory=dict)   # op -> its name string, if only its rows use it
    imports: dict[str, int] = field(default_factory=dict)    # imported symbol -> dynamic-linking bytes
    importers: dict[str, list[str]] = field(default_factory=dict)  # imported symbol -> objects that use it


@dataclass
class Attribution:
    file_size: int
    method: str
    format: str
    ledger: Ledger
    sections: list[dict]
    costs: LinkCosts = field(default_factory=LinkCosts)
    graph: sections_mod.SectionGraph | None = None   # kept input sections and their references (link-map only)

    @property
    def warnings(self) -> list[str]:
        return self.ledger.warnings


def _same_layout(a: binfmt.Section, b: binfmt.Section | None) -> bool:
    return b is not None and a.addr == b.addr and a.size == b.size


def _content(sec: binfmt.Section) -> bool:
    return sec.alloc and sec.kind in ("code", "rodata", "data") and sec.file_size > 0 and sec.name not in _SYNTHETIC


def attribute_image(library: Path, unstripped: Path | None, objs: _Objects,
                    map_sections: list[linkmap.OutputSection] | None, map_expected: bool = False,
                    map_problem: str | None = None) -> Attribution:
    """map_expected: the link wrote a map, so code and data are attributed by it or,
    when it is missing, unreadable or does not match, left unattributed (with a
    warning) rather than guessed from symbols. Without a map (Mach-O dylibs) they are
    attributed by symbols."""
    data = Path(library).read_bytes()
    img = binfmt.read(library, data)
    sym_img = binfmt.read(unstripped) if unstripped and Path(unstripped).is_file() else img
    ledger = Ledger()
    method = "symbols"
    by_map = {}
    if map_sections:
        by_map = {o.name: o for o in map_sections}
        ok = all(s.name in by_map and (by_map[s.name].addr, by_map[s.name].size) == (s.addr, s.size)
                 for s in sym_img.sections if _content(s))
        if ok:
            method = "link-map"
        else:
            map_problem = "its sections do not match the library's layout"
            by_map = {}
    no_owner = map_expected and not by_map
    if no_owner:
        method = "unattributed"
        ledger.warn(f"{Path(library).name}: link map unusable ({map_problem or 'no map'}); "
                    "code and data are reported as unattributed")
    syms_by_sec: dict[str, list[binfmt.Symbol]] = defaultdict(list)
    for s in sym_img.sized_symbols():
        syms_by_sec[s.section].append(s)
    if sym_img is img and not img.symbols:
        ledger.notes.append("no symbol table (no unstripped twin): code and data are unattributed")
    ranges = []
    for sec in img.sections:
        if sec.file_size:
            ranges.append((sec.offset, sec.file_size, sec))
    for name, off, size in img.headers:
        ranges.append((off, size, name))
    sections_out = []
    for off, size, tag in _cover(len(data), ranges):
        if tag is None:
            ledger.over("file alignment padding", size)
        elif isinstance(tag, str):
            ledger.over(tag, size)
        else:
            sec = tag
            twin = sym_img.section(sec.name)
            if _content(sec) and no_owner:
                ledger.lost(sec.name, size)
            elif _content(sec) and _same_layout(sec, twin) and size == sec.file_size:
                if sec.name in by_map:
                    _attribute_section_by_map(ledger, objs, sym_img, twin, by_map[sec.name])
                else:
                    _attribute_section_by_symbols(ledger, objs, sym_img, twin, syms_by_sec.get(sec.name, []))
            elif _content(sec):
                if not _same_layout(sec, twin):
                    ledger.notes.append(f"{sec.name}: the unstripped twin's layout differs; left unattributed")
                ledger.lost(sec.name, size)
            else:
                ledger.over(sec.name, size, sec.name)
    for sec in img.sections:
        if sec.file_size:
            sections_out.append({"name": sec.name, "kind": sec.kind, "file_offset": sec.offset, "file_size": sec.file_size,
                                 "vm_size": sec.size if sec.alloc else 0})
        elif sec.alloc and sec.size:
            sections_out.append({"name": sec.name, "kind": sec.kind, "file_offset": sec.offset, "file_size": 0, "vm_size": sec.size})
    costs, graph = LinkCosts(), None
    if not no_owner:
        costs = _link_costs(objs, img, data)
    if by_map:
        kept = [(rel, i.section, i.size) for o in by_map.values() for i in o.inputs
                if i.file != "<internal>" and (rel := objs.lookup_file(i.file)) is not None]
        exported = {s.name for s in img.symbols if s.defined and not s.local}
        try:
            graph = sections_mod.build(objs.paths(), kept, exported)
        except Exception as e:  # the graph only refines marginal bytes; the attribution stands without it
            ledger.notes.append(f"no section graph for marginal bytes ({type(e).__name__}: {e})")
    return Attribution(len(data), method, img.format, ledger, sections_out, costs, graph)


# The generated kernel table (templates/registry.c.j2): one row per kernel object.
REGISTRY_TABLE = ("mrt_kernels", "_mrt_kernels")


def _link_costs(objs: _Objects, img: binfmt.Image, data: bytes) -> LinkCosts:
    costs = LinkCosts()
    kernels = [rel for rel, c in objs.comp.items() if c.kind == "kernel"]
    registry = [rel for rel, c in objs.comp.items() if c.kind == "registry"]
    if kernels and registry:
        reg = registry[0]
        info = objs.info.get(reg)
        table = next((n for n in REGISTRY_TABLE if info and n in info.defined), None)
        if table:
            table_bytes = sum(size for _, size in info.defined[table])
            # Each pointer in a row is a relative relocation in the shared library.
            rel = next((s for s in img.sections if s.name in (".rela.dyn", ".rel.dyn") and s.entsize), None)
            reloc_bytes = info.relocs_of.get(table, 0) * rel.entsize if rel is not None else 0
            costs.registry_row = (table_bytes + reloc_bytes) / len(kernels)
        by_op: dict[str, list[str]] = defaultdict(list)
        for rel_ in kernels:
            by_op[objs.comp[rel_].op].append(rel_)
        for op, mine in by_op.items():
            name = op.rsplit(".", 1)[-1].encode() + b"\0"
            owners = objs.owners_of_string(name)
            if reg in owners and set(owners) <= {reg, *mine}:
                costs.op_names[op] = len(name)
    if img.format == "elf":
        try:
            costs.imports = binfmt.elf_import_bytes(data)
        except Exception:  # a table we cannot read costs nothing here; the totals are unaffected
            costs.imports = {}
        for rel_, info in objs.info.items():
            for name in info.undefined:
                if name in costs.imports:
                    costs.importers.setdefault(name, []).append(rel_)
    return costs


def unreadable(library: Path, reason: str) -> Attribution:
    """A file the report cannot read: all of it unattributed, with a warning."""
    size = Path(library).stat().st_size if Path(library).is_file() else 0
    ledger = Ledger()
    ledger.lost("whole file", size)
    ledger.warn(f"{Path(library).name}: cannot attribute ({reason}); its {size} bytes are reported as unattributed")
    return Attribution(size, "unattributed", "unknown", ledger, [])


def attribute_archive(library: Path, objs: _Objects) -> Attribution:
    data = Path(library).read_bytes()
    members = binfmt.read_archive(library, data)
    ledger = Ledger()
    ledger.over("archive header", 8)
    fmt = "ar"
    sections_out: dict[str, dict] = {}
    for m in members:
        ledger.over("archive member headers", m.header_size)
        ledger.over("archive padding", m.padding)
        if m.is_index:
            ledger.over("archive symbol index" if "SYM" in m.name or m.name == "/" else "archive name table", m.data_size)
            continue
        rel = objs.by_hash.get(hashlib.sha256(m.data).hexdigest())
        if rel is None:
            cands = objs.by_base.get(m.name, [])
            rel = cands[0] if len(cands) == 1 else None
        try:
            img = binfmt.read(m.name, m.data)
        except binfmt.FormatError:
            ledger.lost(f"member {m.name}", m.data_size)
            continue
        fmt = f"ar/{img.format}"
        ranges = [(s.offset, s.file_size, s) for s in img.sections if s.file_size] + \
                 [(off, size, name) for name, off, size in img.headers]
        comp = objs.comp.get(rel) if rel else None
        if comp is not None:
            objs.comp[rel].member_bytes = m.header_size + m.data_size + m.padding
        for off, size, tag in _cover(len(m.data), ranges):
            if tag is None:
                ledger.over("object file padding", size)
            elif isinstance(tag, str):
                name = "debug info" if tag.startswith("relocations (__DWARF") else tag.split(" (")[0]
                ledger.over(f"object {name}", size)
            else:
                sec = tag
                entry = sections_out.setdefault(sec.name, {"name": sec.name, "kind": sec.kind, "file_offset": 0,
                                                           "file_size": 0, "vm_size": 0})
                entry["file_size"] += size
                entry["vm_size"] += sec.size if sec.alloc else 0
                if sec.kind == "meta":
                    ledger.over("debug info" if "DWARF" in sec.name or "debug" in sec.name else f"object {sec.name}",
                                size, sec.name)
                elif comp is None:
                    ledger.lost(sec.name, size)
                else:
                    ledger.give(comp, sec.name, size, sec.name)
        if comp is None:
            ledger.notes.append(f"archive member {m.name} matches no object of this build")
    return Attribution(len(data), "archive-members", fmt, ledger, sorted(sections_out.values(), key=lambda s: s["name"]))


def attribute_target(tb) -> Attribution:
    """Attribute one build.TargetBuild's deliverable (tb.library), with the link map
    its link step wrote (tb.link_map) when it writes one. Never raises on a file it
    cannot read: that is reported as unattributed bytes with a warning."""
    lib = Path(tb.library)
    try:
        objs = _Objects(tb.dir, tb.objects)
        head = lib.read_bytes()[:8]
        kind = binfmt.sniff(head)
        if kind == "ar":
            return attribute_archive(lib, objs)
        if kind not in ("elf", "macho"):
            return unreadable(lib, f"a {kind} file, not ELF, thin Mach-O or ar")
        map_path = getattr(tb, "link_map", None)
        map_sections, problem = None, None
        if map_path is not None:
            try:
                map_sections = linkmap.parse(Path(map_path).read_text(errors="replace"))
            except OSError as e:
                problem = f"cannot read {Path(map_path).name}: {e.strerror or e}"
            else:
                if not map_sections:
                    problem = f"{Path(map_path).name} is not an ld.lld map"
        return attribute_image(lib, tb.unstripped, objs, map_sections, map_expected=map_path is not None,
                               map_problem=problem)
    except OSError as e:
        return unreadable(lib, e.strerror or str(e))
    except Exception as e:  # a malformed file must not fail the build: report it
        return unreadable(lib, f"{type(e).__name__}: {e}")

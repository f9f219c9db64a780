"""The link's section graph: which input sections the linker kept (from the link map)
and which of them refer to which (from the objects' relocations), so the report can
replay `--gc-sections` without a set of objects and say what else would go with them:
the GEMM routines only Gemm calls, the attribute readers only one kernel uses, the
library functions only they import.

ELF objects only; where there is no map (Mach-O) the report counts whole objects.
"""

from __future__ import annotations

import io
import struct
from collections import defaultdict
from pathlib import Path

Node = tuple[str, str]   # (object id, input section name)


class SectionGraph:
    def __init__(self):
        self.size: dict[Node, int] = defaultdict(int)          # kept input section -> bytes in the library
        self.edges: dict[Node, set[Node]] = defaultdict(set)
        self.imports: dict[Node, set[str]] = defaultdict(set)   # section -> symbols it takes from other libraries
        self.roots: set[Node] = set()
        # Merged strings: lld keeps each string of a SHF_MERGE section only if a live
        # section refers to it, so a string goes when all the sections using it go.
        self.strings: dict[Node, set[bytes]] = defaultdict(set)    # section -> strings it refers to
        self.holders: dict[bytes, set[str]] = defaultdict(set)     # string -> objects that carry it
        self._full: set[Node] | None = None

    def reach(self, without: set[str] = frozenset()) -> set[Node]:
        """Kept sections still reachable from the roots when the objects `without` are gone."""
        todo = [n for n in self.roots if n[0] not in without]
        seen = set(todo)
        while todo:
            n = todo.pop()
            for m in self.edges.get(n, ()):
                if m not in seen and m[0] not in without and m in self.size:
                    seen.add(m)
                    todo.append(m)
        return seen

    def full(self) -> set[Node]:
        if self._full is None:
            self._full = self.reach()
        return self._full

    def strings_lost(self, lost: set[Node], without: set[str]) -> int:
        """Bytes of merged strings that only lost sections used, except those the
        objects `without` carry (counted with those objects)."""
        users: dict[bytes, set[Node]] = defaultdict(set)
        for n in self.full():
            for st in self.strings.get(n, ()):
                users[st].add(n)
        return sum(len(st) for st, who in users.items()
                   if who <= lost and not (self.holders.get(st, set()) & without))

    def lost(self, without: set[str]) -> set[Node]:
        """Sections reachable now that would not be without those objects (theirs included)."""
        return self.full() - self.reach(without)


def _string_at(pool: bytes, addend: int) -> bytes | None:
    """The string a relocation points at; x86's PC-relative forms are biased by -4."""
    for off in (addend, addend + 4):
        if 0 <= off < len(pool) and (off == 0 or pool[off - 1] == 0):
            end = pool.find(b"\0", off)
            return pool[off:end + 1] if end >= 0 else None
    return None


def _relocations(elf, rsec):
    """(symbol index, addend) of each entry of a REL/RELA section, read straight from
    its bytes (the ELF layouts are fixed; pyelftools' per-entry parse is the slow part
    of a size report). REL entries carry no addend: 0, as pyelftools gives."""
    rela = rsec["sh_type"] == "SHT_RELA"
    wide = elf.elfclass == 64
    fmt = ("<" if elf.little_endian else ">") + {(True, True): "QQq", (True, False): "QQ",
                                                 (False, True): "IIi", (False, False): "II"}[wide, rela]
    shift = 32 if wide else 8
    for entry in struct.iter_unpack(fmt, rsec.data()):
        yield entry[1] >> shift, entry[2] if rela else 0


def build(objects: dict[str, Path], kept: list[tuple[str, str, int]], exported: set[str]) -> SectionGraph | None:
    """objects: id -> object file; kept: (object id, input section, bytes) from the map;
    exported: the library's exported symbol names. None when an object is not ELF."""
    from elftools.elf.elffile import ELFFile
    g = SectionGraph()
    for obj, sec, n in kept:
        g.size[(obj, sec)] += n
    parsed = {}
    defs: dict[str, Node] = {}
    for obj, path in sorted(objects.items()):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        if data[:4] != b"\x7fELF":
            return None
        elf = ELFFile(io.BytesIO(data))
        names = {i: s.name for i, s in enumerate(elf.iter_sections())}
        pools = {}
        for i, sec in enumerate(elf.iter_sections()):
            if sec["sh_flags"] & 0x30 == 0x30 and sec["sh_type"] == "SHT_PROGBITS":  # SHF_MERGE | SHF_STRINGS
                blob = sec.data()
                pools[i] = blob
                for piece in blob.split(b"\0")[:-1]:
                    g.holders[piece + b"\0"].add(obj)
        parsed[obj] = (elf, names, pools)
        symtab = elf.get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab is not None else ():
            shndx = sym["st_shndx"]
            if sym.name and isinstance(shndx, int) and shndx and sym["st_info"]["bind"] != "STB_LOCAL":
                defs.setdefault(sym.name, (obj, names[shndx]))
    for obj, (elf, names, pools) in parsed.items():
        symbols = {}  # symtab index -> [(name, shndx, value)], each table parsed once
        for rsec in elf.iter_sections():
            if rsec["sh_type"] not in ("SHT_RELA", "SHT_REL") or rsec["sh_info"] not in names:
                continue
            src = (obj, names[rsec["sh_info"]])
            link = rsec["sh_link"]
            if link not in symbols:
                symbols[link] = [(sym.name, sym["st_shndx"], sym["st_value"])
                                 for sym in elf.get_section(link).iter_symbols()]
            table = symbols[link]
            for sym_index, addend in _relocations(elf, rsec):
                name, shndx, value = table[sym_index]
                if isinstance(shndx, int) and shndx in pools:
                    got = _string_at(pools[shndx], value + addend)
                    if got:
                        g.strings[src].add(got)
                    continue
                if isinstance(shndx, int) and shndx:
                    dst = (obj, names[shndx])
                elif name in defs:
                    dst = defs[name]
                else:
                    if name:
                        g.imports[src].add(name)
                    continue
                if dst != src:
                    g.edges[src].add(dst)
    referenced = {m for n, ms in g.edges.items() if n in g.size for m in ms}
    # Kept for a reason the graph does not show (exported, retained): no kept section refers to it.
    g.roots = {n for n in g.size if n not in referenced}
    g.roots |= {defs[s] for s in exported if s in defs and defs[s] in g.size}
    return g

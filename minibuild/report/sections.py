"""The link's section graph: which input sections the linker kept (from the link map)
and which of them refer to which (from the objects' relocations), so the report can
replay `--gc-sections` without a set of objects and say what else would go with them:
the GEMM routines only Gemm calls, the attribute readers only one kernel uses, the
library functions only they import.

ELF objects only; where there is no map (Mach-O) the report counts whole objects.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

Node = tuple[str, str]   # (object id, input section name)


class SectionGraph:
    def __init__(self):
        self.size: dict[Node, int] = defaultdict(int)          # kept input section -> bytes in the library
        self.edges: dict[Node, set[Node]] = defaultdict(set)
        self.imports: dict[Node, set[str]] = defaultdict(set)   # section -> symbols it takes from other libraries
        self.roots: set[Node] = set()
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

    def lost(self, without: set[str]) -> set[Node]:
        """Sections reachable now that would not be without those objects (theirs included)."""
        return self.full() - self.reach(without)


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
        parsed[obj] = (elf, names)
        symtab = elf.get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab is not None else ():
            shndx = sym["st_shndx"]
            if sym.name and isinstance(shndx, int) and shndx and sym["st_info"]["bind"] != "STB_LOCAL":
                defs.setdefault(sym.name, (obj, names[shndx]))
    for obj, (elf, names) in parsed.items():
        for rsec in elf.iter_sections():
            if rsec["sh_type"] not in ("SHT_RELA", "SHT_REL") or rsec["sh_info"] not in names:
                continue
            src = (obj, names[rsec["sh_info"]])
            symtab = elf.get_section(rsec["sh_link"])
            for r in rsec.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                shndx = sym["st_shndx"]
                if isinstance(shndx, int) and shndx:
                    dst = (obj, names[shndx])
                elif sym.name in defs:
                    dst = defs[sym.name]
                else:
                    if sym.name:
                        g.imports[src].add(sym.name)
                    continue
                if dst != src:
                    g.edges[src].add(dst)
    referenced = {m for n, ms in g.edges.items() if n in g.size for m in ms}
    # Kept for a reason the graph does not show (exported, retained): no kept section refers to it.
    g.roots = {n for n in g.size if n not in referenced}
    g.roots |= {defs[s] for s in exported if s in defs and defs[s] in g.size}
    return g

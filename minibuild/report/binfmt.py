"""Read the few things size attribution needs from ELF and Mach-O files and from
`ar` archives: where each section lies in the file, the symbols (name, address,
size, section) and, for object files, the defined symbols and merged-constant
content. ELF through pyelftools; Mach-O and ar with a small reader of our own
(the formats are simple and fixed, and `lief` is not a dependency)."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Section:
    name: str
    offset: int        # file offset
    file_size: int     # bytes in the file (0 for NOBITS / zerofill)
    addr: int
    size: int          # size in memory
    align: int = 1
    alloc: bool = True  # loaded at run time
    kind: str = "data"  # code | rodata | data | bss | meta (linker/loader tables, non-alloc)
    entsize: int = 0
    merge_strings: bool = False
    merge: bool = False
    segment: str = ""   # Mach-O segment name


@dataclass
class Symbol:
    name: str
    addr: int
    size: int          # 0 when the format does not say (Mach-O): see Image.sized_symbols
    section: str       # section name ("" when undefined / absolute)
    defined: bool = True
    local: bool = False
    func: bool = False


@dataclass
class Image:
    """One linked binary or one object file."""
    path: str
    format: str                     # "elf" | "macho"
    file_size: int
    sections: list[Section]
    symbols: list[Symbol]
    headers: list[tuple[str, int, int]] = field(default_factory=list)  # (name, offset, size) of non-section ranges
    relocatable: bool = False
    data: bytes = b""
    relocs: dict[str, int] = field(default_factory=dict)  # section -> relocation entries that patch it

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def bytes_at(self, sec: Section, addr: int, size: int) -> bytes:
        if sec.file_size == 0:
            return b""
        start = sec.offset + (addr - sec.addr)
        return self.data[start:start + size]

    def sized_symbols(self) -> list[Symbol]:
        """Defined symbols with sizes; where the format carries none (Mach-O), a
        symbol runs to the next symbol of its section or the section's end."""
        out = [s for s in self.symbols if s.defined and s.section]
        if self.format == "elf":
            return [s for s in out if s.size > 0]
        by_sec: dict[str, list[Symbol]] = {}
        for s in out:
            by_sec.setdefault(s.section, []).append(s)
        result = []
        for name, syms in by_sec.items():
            sec = self.section(name)
            if sec is None:
                continue
            end = sec.addr + sec.size
            addrs = sorted({s.addr for s in syms})
            nxt = {a: (addrs[i + 1] if i + 1 < len(addrs) else end) for i, a in enumerate(addrs)}
            for s in syms:
                result.append(Symbol(s.name, s.addr, max(0, nxt[s.addr] - s.addr), s.section, True, s.local, s.func))
        return result


class FormatError(Exception):
    pass


def sniff(data: bytes) -> str:
    if data[:4] == b"\x7fELF":
        return "elf"
    if data[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"):
        return "macho"
    if data[:4] in (b"\xca\xfe\xba\xbe", b"\xbe\xba\xfe\xca"):
        return "fat"
    if data[:8] == b"!<arch>\n":
        return "ar"
    return "unknown"


def read(path, data: bytes | None = None) -> Image:
    data = Path(path).read_bytes() if data is None else data
    kind = sniff(data)
    if kind == "elf":
        return _read_elf(str(path), data)
    if kind == "macho":
        return _read_macho(str(path), data)
    raise FormatError(f"{path}: not an ELF or thin Mach-O file ({kind})")


# ---------------------------------------------------------------- ELF

_ELF_META_TYPES = {"SHT_DYNSYM", "SHT_STRTAB", "SHT_HASH", "SHT_GNU_HASH", "SHT_GNU_versym", "SHT_GNU_verneed",
                   "SHT_GNU_verdef", "SHT_RELA", "SHT_REL", "SHT_DYNAMIC", "SHT_NOTE", "SHT_SYMTAB",
                   "SHT_ARM_ATTRIBUTES", "SHT_RELR", "SHT_ANDROID_RELA", "SHT_ANDROID_REL", "SHT_ANDROID_RELR"}


def _read_elf(path: str, data: bytes) -> Image:
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    h = elf.header
    headers = [("ELF header", 0, h["e_ehsize"])]
    if h["e_phnum"]:
        headers.append(("program headers", h["e_phoff"], h["e_phnum"] * h["e_phentsize"]))
    if h["e_shnum"]:
        headers.append(("section header table", h["e_shoff"], h["e_shnum"] * h["e_shentsize"]))
    sections = []
    index_name = {}
    for i, s in enumerate(elf.iter_sections()):
        index_name[i] = s.name
        if i == 0:
            continue
        flags = s["sh_flags"]
        typ = s["sh_type"]
        alloc = bool(flags & SH_FLAGS.SHF_ALLOC)
        nobits = typ == "SHT_NOBITS"
        if not alloc or typ in _ELF_META_TYPES:
            kind = "meta"
        elif nobits:
            kind = "bss"
        elif flags & SH_FLAGS.SHF_EXECINSTR:
            kind = "code"
        elif flags & SH_FLAGS.SHF_WRITE:
            kind = "data"
        else:
            kind = "rodata"
        sections.append(Section(
            name=s.name, offset=s["sh_offset"], file_size=0 if nobits else s["sh_size"], addr=s["sh_addr"],
            size=s["sh_size"], align=max(1, s["sh_addralign"]), alloc=alloc, kind=kind, entsize=s["sh_entsize"],
            merge=bool(flags & SH_FLAGS.SHF_MERGE), merge_strings=bool(flags & SH_FLAGS.SHF_STRINGS)))
    relocs = {}
    for s in elf.iter_sections():
        if s["sh_type"] in ("SHT_RELA", "SHT_REL") and s["sh_entsize"] and s["sh_info"] in index_name:
            target = index_name[s["sh_info"]]
            relocs[target] = relocs.get(target, 0) + s["sh_size"] // s["sh_entsize"]
    symbols = []
    symtab = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
    if symtab is not None:
        for sym in symtab.iter_symbols():
            t = sym["st_info"]["type"]
            if not sym.name or t in ("STT_FILE", "STT_SECTION"):
                continue
            shndx = sym["st_shndx"]
            defined = isinstance(shndx, int) and shndx != 0
            symbols.append(Symbol(sym.name, sym["st_value"], sym["st_size"],
                                  index_name.get(shndx, "") if defined else "", defined,
                                  sym["st_info"]["bind"] == "STB_LOCAL", t == "STT_FUNC"))
    return Image(path, "elf", len(data), sections, symbols, headers, relocatable=h["e_type"] == "ET_REL", data=data,
                 relocs=relocs)


def elf_import_bytes(data: bytes) -> dict[str, int]:
    """A linked ELF image's cost of each symbol it imports from another library:
    its .dynsym entry and name, its version and SysV hash slots, and its PLT slot
    (.plt entry, .got.plt word, .rela.plt entry) or GOT slot (.got word, .rela.dyn
    entry). What would go if nothing imported the symbol any more."""
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return {}
    word = elf.elfclass // 8
    has = {s.name: s for s in elf.iter_sections()}
    fixed = dynsym["sh_entsize"] + (2 if ".gnu.version" in has else 0) + (4 if ".hash" in has else 0)
    cost = {}
    for i, sym in enumerate(dynsym.iter_symbols()):
        if i and sym.name and sym["st_shndx"] == "SHN_UNDEF":
            cost[sym.name] = fixed + len(sym.name.encode()) + 1
    names = [sym.name for sym in dynsym.iter_symbols()]
    plt = has.get(".plt")
    for rsec in elf.iter_sections():
        if rsec["sh_type"] not in ("SHT_RELA", "SHT_REL") or not (rsec["sh_flags"] & 2):  # SHF_ALLOC
            continue
        jump = rsec.name.endswith(".plt")
        slots = [r["r_info_sym"] for r in rsec.iter_relocations()]
        # lld's PLT: a header, then one entry per slot; header sizes differ per arch.
        per_plt = plt["sh_size"] // (len(slots) + 1) if jump and plt is not None and slots else 0
        for k in slots:
            name = names[k] if 0 < k < len(names) else ""
            if name in cost:
                cost[name] += rsec["sh_entsize"] + word + per_plt
    return cost


# ---------------------------------------------------------------- Mach-O

_LC_SEGMENT_64 = 0x19
_LC_SEGMENT = 0x1
_LC_SYMTAB = 0x2
_LC_DYSYMTAB = 0xB
_MH_OBJECT = 0x1
_S_ZEROFILL = {0x1, 0xC, 0x12}
_S_CSTRING_LITERALS = 0x2
_S_LITERALS = {0x3: 4, 0x4: 8, 0xE: 16}
_S_ATTR_PURE_INSTRUCTIONS = 0x80000000
_S_ATTR_SOME_INSTRUCTIONS = 0x400
_N_STAB = 0xE0
_N_TYPE = 0x0E
_N_SECT = 0x0E
_N_EXT = 0x01


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def _read_macho(path: str, data: bytes) -> Image:
    magic = data[:4]
    is64 = magic == b"\xcf\xfa\xed\xfe"
    hdr_size = 32 if is64 else 28
    _, _, _, filetype, ncmds, sizeofcmds, _ = struct.unpack_from("<IiiIIII", data, 0)
    sections: list[Section] = []
    headers = [("Mach-O header and load commands", 0, hdr_size + sizeofcmds)]
    symtab = None
    relocs: dict[str, int] = {}
    linkedit_ranges = []
    off = hdr_size
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<II", data, off)
        if cmd in (_LC_SEGMENT_64, _LC_SEGMENT):
            if cmd == _LC_SEGMENT_64:
                segname = _cstr(data[off + 8:off + 24])
                vmaddr, vmsize, fileoff, filesize, _, _, nsects, _ = struct.unpack_from("<QQQQiiII", data, off + 24)
                sec_off, sec_size = off + 72, 80
            else:
                segname = _cstr(data[off + 8:off + 24])
                vmaddr, vmsize, fileoff, filesize, _, _, nsects, _ = struct.unpack_from("<IIIIiiII", data, off + 24)
                sec_off, sec_size = off + 56, 68
            if segname == "__LINKEDIT":
                linkedit_ranges.append((fileoff, filesize))
            for i in range(nsects):
                p = sec_off + i * sec_size
                sectname = _cstr(data[p:p + 16])
                seg = _cstr(data[p + 16:p + 32])
                if is64:
                    addr, size, offset, align, reloff, nreloc, flags = struct.unpack_from("<QQIIIII", data, p + 32)
                else:
                    addr, size, offset, align, reloff, nreloc, flags = struct.unpack_from("<IIIIIII", data, p + 32)
                typ = flags & 0xFF
                zerofill = typ in _S_ZEROFILL
                if zerofill:
                    kind = "bss"
                elif flags & (_S_ATTR_PURE_INSTRUCTIONS | _S_ATTR_SOME_INSTRUCTIONS):
                    kind = "code"
                elif seg in ("__TEXT",):
                    kind = "rodata"
                elif sectname.startswith("__debug") or seg == "__DWARF" or sectname in ("__compact_unwind", "__eh_frame") and filetype == _MH_OBJECT:
                    kind = "meta"
                else:
                    kind = "data"
                name = f"{seg},{sectname}"
                sections.append(Section(name, offset, 0 if zerofill else size, addr, size, 1 << align,
                                        alloc=kind != "meta", kind=kind,
                                        entsize=_S_LITERALS.get(typ, 0), merge=typ in _S_LITERALS or typ == _S_CSTRING_LITERALS,
                                        merge_strings=typ == _S_CSTRING_LITERALS, segment=seg))
                if nreloc:
                    headers.append((f"relocations ({name})", reloff, nreloc * 8))
                    relocs[name] = relocs.get(name, 0) + nreloc
        elif cmd == _LC_SYMTAB:
            symoff, nsyms, stroff, strsize = struct.unpack_from("<IIII", data, off + 8)
            symtab = (symoff, nsyms, stroff, strsize)
            headers.append(("symbol table", symoff, nsyms * (16 if is64 else 12)))
            headers.append(("string table", stroff, strsize))
        off += cmdsize
    symbols = []
    if symtab:
        symoff, nsyms, stroff, strsize = symtab
        ent = 16 if is64 else 12
        for i in range(nsyms):
            p = symoff + i * ent
            if is64:
                strx, ntype, nsect, _, value = struct.unpack_from("<IBBHQ", data, p)
            else:
                strx, ntype, nsect, _, value = struct.unpack_from("<IBBhI", data, p)
            if ntype & _N_STAB:
                continue
            name = _cstr(data[stroff + strx:stroff + strx + 4096]) if strx else ""
            if not name:
                continue
            defined = (ntype & _N_TYPE) == _N_SECT and 1 <= nsect <= len(sections)
            sec = sections[nsect - 1] if defined else None
            symbols.append(Symbol(name, value, 0, sec.name if sec else "", defined, not (ntype & _N_EXT),
                                  bool(sec and sec.kind == "code")))
    # Linked images keep other tables (dyld info, exports, function starts, code
    # signature) inside __LINKEDIT: name the rest of that segment as one range.
    for fo, fs in linkedit_ranges:
        headers.append(("__LINKEDIT (dyld info, exports, signature)", fo, fs))
    return Image(path, "macho", len(data), sections, symbols, headers, relocatable=filetype == _MH_OBJECT, data=data,
                 relocs=relocs)


# ---------------------------------------------------------------- ar archives

@dataclass
class Member:
    name: str
    header_offset: int
    header_size: int    # the 60-byte header plus a BSD long name stored in the data
    data_offset: int
    data_size: int
    padding: int        # the 1-byte pad to an even offset
    data: bytes

    @property
    def is_index(self) -> bool:
        return self.name in ("/", "//", "__.SYMDEF", "__.SYMDEF SORTED", "/SYM64/", "__.SYMDEF_64", "__.SYMDEF_64 SORTED", "ARFILENAMES/")


def read_archive(path, data: bytes | None = None) -> list[Member]:
    data = Path(path).read_bytes() if data is None else data
    if data[:8] != b"!<arch>\n":
        raise FormatError(f"{path}: not an ar archive")
    members = []
    longnames = b""
    off = 8
    while off + 60 <= len(data):
        hdr = data[off:off + 60]
        raw_name = hdr[:16].decode("ascii", "replace").rstrip()
        size = int(hdr[48:58].decode().strip() or 0)
        body = off + 60
        name_len = 0
        if raw_name.startswith("#1/"):           # BSD: the name leads the data
            name_len = int(raw_name[3:])
            name = _cstr(data[body:body + name_len])
        elif raw_name == "//":                    # GNU long-name table
            longnames = data[body:body + size]
            name = "//"
        elif raw_name.startswith("/") and raw_name[1:].isdigit():
            start = int(raw_name[1:])
            name = longnames[start:].split(b"/\n", 1)[0].split(b"\n", 1)[0].decode()
        else:
            name = raw_name[:-1] if raw_name.endswith("/") and raw_name not in ("/", "//") else raw_name
        pad = size & 1
        members.append(Member(name, off, 60 + name_len, body + name_len, size - name_len, pad,
                              data[body + name_len:body + size]))
        off = body + size + pad
    return members


# ---------------------------------------------------------------- object files

@dataclass
class ObjectInfo:
    """What one compiled object brings to a link: its defined symbols and the
    entries of its merged-constant sections (strings, 4/8/16-byte literals)."""
    path: str
    format: str
    defined: dict[str, list[tuple[str, int]]]   # symbol -> [(section, size)]
    strings: set[bytes]
    literals: dict[int, set[bytes]]             # entry size -> entries
    section_sizes: dict[str, int]               # alloc section -> bytes
    undefined: set[str] = field(default_factory=set)        # symbols it needs from elsewhere
    relocs_of: dict[str, int] = field(default_factory=dict)  # defined symbol -> relocations in its section


def object_info(path, data: bytes | None = None) -> ObjectInfo:
    img = read(path, data)
    defined: dict[str, list[tuple[str, int]]] = {}
    for s in img.sized_symbols() if img.format == "macho" else img.symbols:
        if s.defined and s.section:
            defined.setdefault(s.name, []).append((s.section, s.size))
    strings: set[bytes] = set()
    literals: dict[int, set[bytes]] = {}
    sizes: dict[str, int] = {}
    for sec in img.sections:
        if sec.alloc and sec.kind != "meta":
            sizes[sec.name] = sizes.get(sec.name, 0) + sec.size
        if not sec.merge or sec.file_size == 0:
            continue
        blob = img.data[sec.offset:sec.offset + sec.file_size]
        if sec.merge_strings:
            strings.update(p + b"\0" for p in blob.split(b"\0")[:-1])
        elif sec.entsize:
            n = sec.entsize
            literals.setdefault(n, set()).update(blob[i:i + n] for i in range(0, len(blob) - n + 1, n))
    undefined = {s.name for s in img.symbols if not s.defined and not s.local}
    relocs_of = {s.name: img.relocs[s.section] for s in img.symbols
                 if s.defined and s.section and img.relocs.get(s.section)}
    return ObjectInfo(str(path), img.format, defined, strings, literals, sizes, undefined, relocs_of)

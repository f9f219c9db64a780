"""Reproducible archives: zip, tar.gz, Darwin `ar` and Mach-O fat (universal) files.

The same inputs give the same bytes: entries sorted by name, fixed timestamps,
fixed owners and modes, no host-dependent metadata. Every function takes the
archive's contents as {archive name: bytes} (directories are implied by the
names) and returns the archive's bytes, so callers write them with
fsutil.write_if_changed and an unchanged build touches nothing.

This file uses only the standard library and runs as a script too: the iOS link
step calls `python archive.py darwin-ar OUT BASE OBJECTS...` from SCons.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# The earliest time a zip entry can carry (DOS date); 0 for tar and gzip.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def tree(root: Path, prefix: str = "") -> dict[str, bytes]:
    """{prefix/relative path: bytes} of every file under `root` (symlinks followed)."""
    root = Path(root)
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[(prefix.rstrip("/") + "/" if prefix else "") + p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def _dirs(names) -> list[str]:
    """Every parent folder of `names`, as 'a/', 'a/b/' (sorted)."""
    dirs = set()
    for n in names:
        parts = n.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]) + "/")
    return sorted(dirs)


def _mode(name: str, executable: set) -> int:
    return 0o755 if name in executable else 0o644


def zip_bytes(files: dict[str, bytes], directories: bool = True, executable=(), compress: bool = True,
              sorted_entries: bool = True) -> bytes:
    """A zip of `files`, entries sorted, all dated 1980-01-01, Unix modes 644/755.
    `directories` adds explicit folder entries (as `ditto`/Xcode zips have).
    `sorted_entries=False` keeps the order of `files` (a wheel puts dist-info last)."""
    executable = set(executable)
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    entries = [(d, None) for d in (_dirs(files) if directories else [])] + [(n, files[n]) for n in files]
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in (sorted(entries, key=lambda e: e[0]) if sorted_entries else entries):
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.create_system = 3  # Unix, so external_attr carries the mode
            if data is None:
                info.external_attr = (0o40755 << 16) | 0x10
                info.compress_type = zipfile.ZIP_STORED
                zf.writestr(info, b"")
            else:
                info.external_attr = (0o100000 | _mode(name, executable)) << 16
                info.compress_type = method
                zf.writestr(info, data, compresslevel=9 if compress else None)
    return buf.getvalue()


def tar_gz_bytes(files: dict[str, bytes], executable=()) -> bytes:
    """A .tar.gz of `files`: sorted, mtime 0, uid/gid 0 with empty owner names,
    modes 644/755, folder entries included, gzip header without name or time."""
    executable = set(executable)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        entries = [(d, None) for d in _dirs(files)] + [(n, files[n]) for n in files]
        for name, data in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), _mode(name, executable)
                tf.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


# --- Darwin static archives ---------------------------------------------------

def member_name(rel: str) -> str:
    """A fixed archive member name for an object at `rel` (relative to the target
    folder): obj/kernels/Conv__float32.o -> kernels-Conv__float32.o. Unique
    where basenames alone could collide (support/gemm.o vs kernels/...)."""
    parts = Path(rel).parts
    if parts and parts[0] == "obj":
        parts = parts[1:]
    return "-".join(parts)


def darwin_ar(output: Path, objects: list[Path], base: Path, zig=(sys.executable, "-m", "ziglang")) -> Path:
    """Write a Darwin-format static archive (`__.SYMDEF` symbol table) of `objects`
    with llvm-ar's deterministic mode: members sorted by their fixed names, dated 0,
    owned by 0:0. The objects are copied under those names first, since ar names
    members after the file's basename."""
    named = sorted((member_name(os.path.relpath(o, base)), Path(o)) for o in objects)
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError(f"archive member names collide: {names}")
    with tempfile.TemporaryDirectory(prefix="mrt-ar-") as tmp:
        for n, o in named:
            Path(tmp, n).write_bytes(o.read_bytes())
        part = Path(tmp) / "out.a"
        subprocess.run([*zig, "ar", "--format=darwin", "rcsD", str(part), *names], cwd=tmp, check=True)
        data = part.read_bytes()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_bytes(data)
    return Path(output)


def ar_members(data: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of each member of a BSD/Darwin or GNU `ar` archive, symbol
    table included (its name is `__.SYMDEF`, `__.SYMDEF SORTED`, `/` ...)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    pos, out, gnu_names = 8, [], b""
    while pos + 60 <= len(data):
        hdr = data[pos:pos + 60]
        name = hdr[:16].decode().rstrip(" ")
        size = int(hdr[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("#1/"):  # BSD: the name follows the header, inside the size
            n = int(name[3:])
            name, body = body[:n].rstrip(b"\0").decode(), body[n:]
        elif name == "//":
            gnu_names = body
        elif name.startswith("/") and name[1:].isdigit() and gnu_names:
            off = int(name[1:])
            name = gnu_names[off:gnu_names.index(b"/\n", off)].decode()
        elif name.endswith("/") and name != "/":
            name = name[:-1]
        out.append((name, body))
        pos += 60 + size + (size & 1)
    return out


# --- Mach-O universal (fat) files -----------------------------------------------

FAT_MAGIC = 0xCAFEBABE
MH_MAGIC_64 = 0xFEEDFACF


def macho_cpu(data: bytes) -> tuple[int, int]:
    """(cputype, cpusubtype) of a thin Mach-O file, or of the first Mach-O member
    of an archive."""
    if data.startswith(b"!<arch>\n"):
        for name, body in ar_members(data):
            if not name.startswith("__.SYMDEF") and len(body) >= 12:
                return macho_cpu(body)
        raise ValueError("archive has no Mach-O member")
    magic, cputype, subtype = struct.unpack_from("<III", data, 0)
    if magic != MH_MAGIC_64:
        raise ValueError(f"not a 64-bit Mach-O file (magic {magic:#x})")
    return cputype, subtype & 0x00FFFFFF


def fat(slices: list[bytes], align_log2: int = 3) -> bytes:
    """A universal file of thin slices (objects, dylibs or archives): the
    big-endian fat_header {magic, nfat_arch} then one fat_arch {cputype,
    cpusubtype, offset, size, align} per slice, each slice at an offset aligned
    to 2**align_log2 (lipo uses 2**3 for archives). Slices sorted by CPU type."""
    items = sorted(((macho_cpu(s), s) for s in slices), key=lambda x: x[0])
    if len({c for c, _ in items}) != len(items):
        raise ValueError("two slices have the same CPU type")
    header = struct.pack(">II", FAT_MAGIC, len(items))
    offset = len(header) + 20 * len(items)
    archs, body = b"", b""
    align = 1 << align_log2
    for (cputype, subtype), s in items:
        pad = (-(offset + len(body))) % align
        body += b"\0" * pad
        archs += struct.pack(">iiIII", cputype, subtype, offset + len(body), len(s), align_log2)
        body += s
    return header + archs + body


LC_SYMTAB, LC_BUILD_VERSION = 0x2, 0x32


def macho_info(data: bytes) -> dict:
    """The facts the packaging checks need from a thin 64-bit Mach-O file:
    cputype, filetype, LC_BUILD_VERSION's platform and minos ("13.0"), and the
    symbol table as (name, n_type) pairs (n_type: N_EXT 0x01, N_PEXT 0x10,
    N_TYPE mask 0x0e with N_SECT 0x0e = defined, 0 = undefined)."""
    magic, cputype, subtype, filetype, ncmds, _sizeofcmds, _flags, _ = struct.unpack_from("<IiiIIIII", data, 0)
    if magic != MH_MAGIC_64:
        raise ValueError(f"not a 64-bit Mach-O file (magic {magic:#x})")
    info = {"cputype": cputype, "cpusubtype": subtype & 0x00FFFFFF, "filetype": filetype,
            "platform": None, "minos": None, "symbols": []}
    off = 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == LC_BUILD_VERSION:
            platform, minos = struct.unpack_from("<II", data, off + 8)
            info["platform"] = platform
            info["minos"] = f"{minos >> 16}.{(minos >> 8) & 0xFF}" + (f".{minos & 0xFF}" if minos & 0xFF else "")
        elif cmd == LC_SYMTAB:
            symoff, nsyms, stroff, _strsize = struct.unpack_from("<IIII", data, off + 8)
            for i in range(nsyms):
                strx, ntype = struct.unpack_from("<IB", data, symoff + 16 * i)
                end = data.index(b"\0", stroff + strx)
                info["symbols"].append((data[stroff + strx:end].decode(), ntype))
        off += size
    return info


def fat_slices(data: bytes) -> list[tuple[int, int, bytes]]:
    """(cputype, cpusubtype, bytes) of each slice of a universal file."""
    magic, n = struct.unpack_from(">II", data, 0)
    if magic != FAT_MAGIC:
        raise ValueError("not a universal (fat) Mach-O file")
    out = []
    for i in range(n):
        cputype, subtype, off, size, _ = struct.unpack_from(">iiIII", data, 8 + 20 * i)
        out.append((cputype, subtype, data[off:off + size]))
    return out


def _main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "darwin-ar":
        darwin_ar(Path(argv[1]), [Path(a) for a in argv[3:]], Path(argv[2]))
        return 0
    print("usage: archive.py darwin-ar OUTPUT BASE_DIR OBJECT...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

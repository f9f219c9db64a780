"""Let bionic serve what bionic has: rt_unbind.py IN.o OUT.o STUB.c...

zig's compiler_rt is one object that also defines memcpy, memset, strlen, expf, ...
(weak, hidden). Once lld pulls it in for a helper bionic lacks (__aeabi_uldivmod,
__udivdi3), those definitions would beat libc.so's, and libminirt.so would carry
its own, slower copies. This turns every name the stub libraries declare
(`STUB(name)` in packaging/android/stubs/*.c) into a plain undefined reference,
so calls bind to bionic; the unused bodies are then dropped by --gc-sections.

Standalone (no minibuild import): SCons runs it as a build step.
"""

import re
import struct
import sys

SHT_SYMTAB = 2
STB_GLOBAL = 1
STB_WEAK = 2


def unbind(data: bytearray, names: set) -> list:
    if data[:4] != b"\x7fELF" or data[5] != 1:
        raise SystemExit("rt_unbind: not a little-endian ELF object")
    is64 = data[4] == 2
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)

    def section(i):
        o = shoff + i * shentsize
        if is64:
            _, typ, _, _, off, size, link, _, _, entsize = struct.unpack_from("<IIQQQQIIQQ", data, o)
        else:
            _, typ, _, _, off, size, link, _, _, entsize = struct.unpack_from("<IIIIIIIIII", data, o)
        return typ, off, size, link, entsize

    changed = []
    for i in range(shnum):
        typ, off, size, link, entsize = section(i)
        if typ != SHT_SYMTAB:
            continue
        _, str_off, _, _, _ = section(link)
        for k in range(size // entsize):
            o = off + k * entsize
            if is64:
                st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, o)
            else:
                st_name, = struct.unpack_from("<I", data, o)
                st_info, _, st_shndx = struct.unpack_from("<BBH", data, o + 12)
            if st_shndx == 0 or (st_info >> 4) not in (STB_GLOBAL, STB_WEAK):
                continue
            end = data.index(b"\0", str_off + st_name)
            name = data[str_off + st_name:end].decode()
            if name not in names:
                continue
            info = (STB_GLOBAL << 4) | (st_info & 0xF)
            if is64:  # name, info, other (default visibility), shndx UNDEF, value 0, size 0
                struct.pack_into("<IBBHQQ", data, o, st_name, info, 0, 0, 0, 0)
            else:
                struct.pack_into("<IIIBBH", data, o, st_name, 0, 0, info, 0, 0)
            changed.append(name)
    return changed


def main(argv):
    src, dst, *stubs = argv
    names = set()
    for s in stubs:
        with open(s) as f:
            names.update(re.findall(r"^STUB\((\w+)\)", f.read(), re.M))
    with open(src, "rb") as f:
        data = bytearray(f.read())
    unbind(data, names)
    with open(dst, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main(sys.argv[1:])

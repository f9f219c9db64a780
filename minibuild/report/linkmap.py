"""The linker's own account of where each input section went: an ld.lld map.

The link step writes it beside the library as part of the build (`lib/<library>.map`:
zig cc's `-Wl,--print-map` captured from stdout, or ld.lld's `-Map=`); this module
only reads it. Attribution uses it only when its output sections match the
library's in address and size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_LINE = re.compile(r"^\s*([0-9a-fA-F]+)\s+([0-9a-fA-F]+)\s+([0-9a-fA-F]+)\s+(\d+) (.*)$")


@dataclass
class InputSection:
    file: str          # object path as the linker saw it, or "<internal>" for linker-made sections
    section: str       # input section name (".text.mrt_conv_run_f32", ".rodata.str1.1")
    addr: int
    size: int
    align: int
    symbols: list[tuple[str, int]] = field(default_factory=list)  # (name, addr)


@dataclass
class OutputSection:
    name: str
    addr: int
    size: int
    align: int
    inputs: list[InputSection] = field(default_factory=list)


def parse(text: str) -> list[OutputSection]:
    """Parse ld.lld's map (the `VMA LMA Size Align Out In Symbol` table)."""
    out: list[OutputSection] = []
    cur_in = None
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        vma, _lma, size, align, rest = m.groups()
        depth = len(rest) - len(rest.lstrip(" "))
        name = rest.strip()
        vma, size, align = int(vma, 16), int(size, 16), int(align)
        if depth == 0:
            out.append(OutputSection(name, vma, size, align))
            cur_in = None
        elif depth <= 8 and out:
            file, sep, sec = name.rpartition(":(")
            if not sep:
                continue
            cur_in = InputSection(file, sec[:-1] if sec.endswith(")") else sec, vma, size, align)
            out[-1].inputs.append(cur_in)
        elif cur_in is not None:
            cur_in.symbols.append((name, vma))
    return out

"""The linker's own account of where each input section went: an ld.lld map.

zig's `cc` refuses `-Map=` but passes `--print-map` (map on stdout) through to
ld.lld, so the map comes from re-running a target's exact link step (same
command, same objects, same order) into a scratch file. It is used only when the
scratch output's sections match the real library's byte for byte in address and
size; otherwise attribution falls back to symbols. A platform that writes its own
map (`lib/<library>.map`, e.g. a direct ld.lld link with `-Map=`) is read as is.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
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


def _with_print_map(command: list[str]) -> list[str]:
    """ld.lld takes `--print-map` directly; zig cc/c++ need it as `-Wl,`."""
    direct = any(Path(c).name in ("ld.lld", "ld64.lld", "lld") or c == "ld.lld" for c in command)
    return command + (["--print-map"] if direct else ["-Wl,--print-map"])


def link_step(plan_file: Path, target_name: str, output: str) -> tuple[list[str], list[str]] | None:
    """(command, object paths) of the plan's link step that wrote `output` (relative to the target dir)."""
    try:
        plan = json.loads(Path(plan_file).read_text())
    except (OSError, ValueError):
        return None
    for t in plan.get("targets", []):
        if t.get("name") != target_name:
            continue
        objects = [str(Path(t["dir"]) / o["target"]) for o in t["objects"]]
        for step in t.get("links", []):
            if step.get("output") == output:
                return list(step["command"]), objects
    return None


def relink_map(plan_file: Path, target_name: str, output: str, env: dict | None = None,
               timeout: int = 120) -> tuple[str, bytes] | None:
    """Re-run one link step with a map; returns (map text, scratch output bytes) or None."""
    step = link_step(plan_file, target_name, output)
    if step is None:
        return None
    command, objects = step
    if any(c.endswith("-s") and c in ("-s", "-Wl,-s", "--strip-all") for c in command):
        command = [c for c in command if c not in ("-s", "-Wl,-s", "--strip-all")]
    with tempfile.TemporaryDirectory(prefix="minibuild-map-") as tmp:
        scratch = str(Path(tmp) / Path(output).name)
        cmd = []
        for c in _with_print_map(command):
            if c == "$SOURCES":
                cmd.extend(objects)
            else:
                cmd.append(c.replace("${TARGET}", scratch).replace("$TARGET", scratch))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0 or not Path(scratch).is_file():
            return None
        return proc.stdout, Path(scratch).read_bytes()

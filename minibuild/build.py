"""Compile: turn the manifest's kernel selection into a build plan and let SCons run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import cache as cache_mod, codegen, domains, dtypes, platforms, resources, toolchain
from .errors import BuildError
from .fsutil import write_if_changed
from .manifest import Manifest
from .registry import Registry
from .toolchain import Target

# The runtime core's units (one-way calls, internal.h), each compiled to its own object.
RUNTIME_UNITS = ("runtime/status.c", "runtime/kernel_ctx.c", "runtime/attrs.c", "runtime/model.c", "runtime/session.c",
                 "runtime/threadpool.c")
RUNTIME_SOURCES = RUNTIME_UNITS


@dataclass
class TargetBuild:
    target: Target
    dir: Path
    library: Path          # the linked, stripped library (or archive)
    unstripped: Path | None  # the same library with its symbol table, for size attribution
    objects: dict          # object path (relative to dir) -> what it holds: ("runtime"|"support"|"kernel"|"registry", name)
    link_map: Path | None = None  # the linker map the link step wrote beside the library, if it writes one


def kernel_defines(op: str, k) -> list[str]:
    """What one (op, signature) object is compiled with. A one-type kernel with its own
    symbols sees MRT_OP_<op> and MRT_TYPE_<type>; a type-family kernel (registry
    `type_constraints` form) also sees, per constraint i, MRT_T<i> (its C type),
    MRT_T<i>_DTYPE (its mrt_dtype) and MRT_T<i>_IS_<type>, and MRT_KERNEL(stem)
    names its symbols stem__<types> (runtime/mrt_kernel.h)."""
    out = [f"MRT_OP_{op}=1"]
    if not k.family:
        return out + [f"MRT_TYPE_{k.types[0]}=1"]
    out.append(f"MRT_KERNEL_SUFFIX=__{k.suffix}")
    for i, t in enumerate(k.instance):
        if t == "any":
            continue
        d = dtypes.get(t)
        out += [f"MRT_T{i}={d.c_type}", f"MRT_T{i}_DTYPE={d.enum}", f"MRT_T{i}_IS_{t}=1"]
    return out


def kernel_units(registry: Registry, manifest: Manifest) -> list[dict]:
    """One compile unit per kernel object the manifest selects: a kernel instantiated
    by element size or for any type serves several signatures from one object."""
    units, seen = [], set()
    for domain, op, sig in manifest.kernels():
        e = registry.get(domain, op)
        k = e.kernels[sig]
        target = f"obj/kernels/{domains.qualified(domain, op)}__{k.suffix}.o"
        if target in seen:
            continue
        seen.add(target)
        units.append({"source": e.source, "target": target, "speed": e.speed, "requires": e.requires,
                      "defines": kernel_defines(op, k), "label": f"{op} {k.label}",
                      "role": ["kernel", f"{domain}.{op}", k.label]})
    return units


def _object_list(target: Target, registry: Registry, manifest: Manifest, gen: Path) -> list[dict]:
    src = resources.path("kernels_src")
    objs = []
    for rel in RUNTIME_SOURCES:
        objs.append({"source": str(src / rel), "target": f"obj/{rel[:-2]}.o", "speed": False,
                     "defines": [], "label": rel, "role": ["runtime", Path(rel).stem]})
    support = set()
    for u in kernel_units(registry, manifest):
        support.update(u["requires"])
        objs.append({"source": str(src / u["source"]), "target": u["target"], "speed": u["speed"],
                     "defines": u["defines"], "label": u["label"], "role": u["role"]})
    for name in sorted(support):
        u = registry.support[name]
        objs.append({"source": str(src / u.source), "target": f"obj/support/{name}.o", "speed": u.speed,
                     "defines": [], "label": f"support {name}", "role": ["support", name]})
    objs.append({"source": str(gen / "registry.c"), "target": "obj/gen/registry.o", "speed": False,
                 "defines": [], "label": "registry.c", "role": ["registry", "registry"]})
    return objs


def plan_target(target: Target, registry: Registry, manifest: Manifest, build_root: Path,
                messages: bool = True, gen: Path | None = None, threads: bool = True,
                tune: str = "speed") -> tuple[dict, TargetBuild]:
    """The SCons plan of one target. `gen` is the folder codegen.render wrote the
    kernel table and config.h into (shared by every target of a build, since they
    depend only on the manifest); a caller that plans one target alone may leave it
    out and have them rendered into BUILD_ROOT/gen here."""
    tdir = build_root / target.name
    if gen is None:
        gen = build_root / "gen"
        codegen.render(registry, manifest, gen, messages=messages, threads=threads, tune=tune)
    src = resources.path("kernels_src")
    # No absolute path may reach an artifact (DWARF of the .debug twin included):
    # sources, the target dir and the compiler's working directory are mapped.
    prefix_map = [f"-ffile-prefix-map={src}=kernels_src", f"-ffile-prefix-map={tdir}=.",
                  f"-ffile-prefix-map={build_root}=."]
    objects = []
    roles = {}
    platform = platforms.get(target.platform)
    # A platform may add objects of its own (Android: the JNI glue), each with
    # optional extra "cflags" (e.g. the JDK's include folders).
    extra = platform.extra_objects(target) if hasattr(platform, "extra_objects") else []
    for o in _object_list(target, registry, manifest, gen) + extra:
        source = o["source"] if os.path.isabs(o["source"]) else str(tdir / o["source"])
        flags = target.cflags(o["speed"] and tune == "speed") + prefix_map + list(o.get("cflags", ())) + [f"-D{d}" for d in o["defines"]]
        objects.append({"source": source, "target": o["target"], "flags": flags, "label": o["label"]})
        roles[o["target"]] = tuple(o["role"])
    links = platform.link_steps(target, tdir)
    plan = {
        "name": target.name, "dir": str(tdir),
        "cc": [*toolchain.ZIG, "cc"],
        "include": [str(src / "include"), str(src / "runtime"), str(src / "kernels"), str(gen)],
        "objects": objects, "links": links,
        # Folders that differ between checkouts and output folders, written as
        # placeholders in the action cache's keys (most specific first).
        "roots": [["<target>", str(tdir)], ["<build>", str(build_root)], ["<kernels_src>", str(src)],
                  ["<zig>", str(toolchain.zig_lib_dir())], ["<python>", sys.executable]],
    }
    by_role: dict[str, list[dict]] = {}
    for step in links:
        by_role.setdefault(step.get("role", "helper"), []).append(step)
    if len(by_role.get("deliverable", [])) != 1 or len(by_role.get("unstripped", [])) > 1:
        raise BuildError(f"{target.platform}.link_steps for {target.name} must give one 'deliverable' step and "
                         f"at most one 'unstripped' step; roles given: {[s.get('role') for s in links]}")
    deliverable = by_role["deliverable"][0]
    unstripped = tdir / by_role["unstripped"][0]["output"] if by_role.get("unstripped") else None
    link_map = tdir / deliverable["map"]["output"] if deliverable.get("map") else None
    return plan, TargetBuild(target, tdir, tdir / deliverable["output"], unstripped, roles, link_map)


def cache_dir() -> str | None:
    """The action cache compile results go to (MINIBUILD_CACHE, default
    ~/.cache/minibuild); None when MINIBUILD_NO_CACHE=1."""
    if os.environ.get("MINIBUILD_NO_CACHE") == "1":
        return None
    return str(cache_mod.default_root())


def zig_env() -> dict:
    env = dict(os.environ)
    cache = Path(env.get("MINIBUILD_CACHE", Path.home() / ".cache" / "minibuild"))
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(cache / "zig"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(cache / "zig-local"))
    return env


def actions_file(build_root: Path) -> Path:
    """What the last SCons run spawned, one JSON line per command (SConstruct)."""
    return Path(build_root) / "actions.jsonl"


def python_actions_file(build_root: Path) -> Path:
    """The Python-side actions (codegen, convert, javac, package) of the last build, one
    JSON line each (minibuild/actions.py), rewritten by every build."""
    return Path(build_root) / "python-actions.jsonl"


def write_python_actions(build_root: Path, records: list[dict]) -> None:
    from .fsutil import write_atomic
    Path(build_root).mkdir(parents=True, exist_ok=True)
    write_atomic(python_actions_file(build_root), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def run_scons(plans: list[dict], build_root: Path, jobs: int | None = None, verbose: bool = False,
              log=None, extra_env: dict | None = None) -> list[str]:
    """Run SCons on the plan; returns the lines it printed (each a step it ran)."""
    build_root.mkdir(parents=True, exist_ok=True)
    plan_file = build_root / "plan.json"
    write_if_changed(plan_file, json.dumps({"build_dir": str(build_root), "quiet": not verbose,
                                            "tool_dir": str(resources.path("site_scons", "site_tools")),
                                            "cache_dir": cache_dir(), "zig_version": toolchain.zig_version(),
                                            "targets": plans}, indent=1, sort_keys=True))
    cmd = [sys.executable, "-m", "SCons", "-Q", "-f", str(resources.path("SConstruct")),
           f"--directory={build_root}", f"-j{jobs or os.cpu_count() or 1}", f"PLAN={plan_file}",
           f"ACTIONS={actions_file(build_root)}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**zig_env(), **(extra_env or {})})
    lines = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if log and not _scons_noise(line):
            log(line)
    if proc.wait() != 0:
        tail = "\n".join(lines[-40:])
        raise BuildError(f"the compile step failed (SCons exit {proc.returncode}); its output:\n{tail}")
    return [l for l in lines if l.strip() and not _scons_noise(l)]


def _scons_noise(line: str) -> bool:
    return line.startswith("scons: ") and ("is up to date" in line or "Entering directory" in line)


class OutputLock:
    """An exclusive lock on an output folder (OUT/.minibuild.lock), held for a whole build:
    a second build into the same folder waits for the first (up to
    MINIBUILD_LOCK_TIMEOUT seconds, default 600), then fails naming the folder. The
    file is created once and never written (a build with no change touches nothing).
    The action cache needs no lock: its entries are written
    under temporary names and renamed, and every read is verified by hash."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / ".minibuild.lock"
        self._f = None

    def __enter__(self):
        import fcntl
        import time
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        timeout = float(os.environ.get("MINIBUILD_LOCK_TIMEOUT") or 600)
        deadline, told = time.monotonic() + timeout, False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    f.close()
                    raise BuildError(f"{self.path.parent}: another minibuild is building into this folder "
                                     f"({self.path} is locked); wait for it to finish, or build into another "
                                     "--out") from None
                if not told:
                    print(f"waiting for another minibuild, which is building into {self.path.parent}",
                          file=sys.stderr)
                    told = True
                time.sleep(0.2)
        self._f = f
        return self

    def __exit__(self, *exc):
        import fcntl
        if self._f is not None:
            fcntl.flock(self._f, fcntl.LOCK_UN)
            self._f.close()
            self._f = None

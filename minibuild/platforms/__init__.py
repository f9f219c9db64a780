"""Platforms: each module here says how to compile, link and package one platform.

A platform module defines:
    TARGETS: dict[str, Target]          ABI -> how to compile for it
    DEFAULT_ABIS: list[str]             what `--platform X` builds without --abi
    link_steps(target, tdir) -> list    SCons link steps (see build.plan_target), each with a
                                        "role": "deliverable" (exactly one), "unstripped"
                                        (the twin with symbols, optional) or "helper"; a
                                        step may also write its linker map ("map": {"output",
                                        "via": "stdout" | "argument" ($MAP in the command)})
    package(ctx) -> list[Path]          lay out the deliverables (ctx: PackageContext)
and optionally:
    extra_objects(target) -> list       objects beyond the kernels (JNI glue, test runners)
    check_options(opts)                 raise ValueError on bad packaging options, before
                                        anything compiles (names, --package-version)
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

MODULES = {
    "linux": "minibuild.platforms.linux",
    "android": "minibuild.platforms.android",
    "ios": "minibuild.platforms.ios",
    "python": "minibuild.platforms.python",
}
ALL = ("linux", "android", "ios", "python")


@dataclass
class PackageContext:
    opts: object              # pipeline.Options
    scan: object              # pipeline.ScanResult (registry, models, needs, manifest)
    model_files: dict         # model name -> converted .mrt path
    builds: list              # build.TargetBuild of this platform
    out: Path                 # the build's output folder


def get(name: str):
    if name not in MODULES:
        raise ValueError(f"unknown platform '{name}'; known: {', '.join(MODULES)} or 'all'")
    try:
        return importlib.import_module(MODULES[name])
    except ModuleNotFoundError as e:
        if e.name == MODULES[name]:
            raise ValueError(f"platform '{name}' is not available in this minibuild") from None
        raise


def expand(spec: list[str]) -> list[str]:
    """'all' and comma lists -> platform names in a stable order, each once."""
    names = []
    for item in spec:
        for p in item.split(","):
            p = p.strip()
            if not p:
                continue
            for q in (ALL if p == "all" else (p,)):
                if q not in names:
                    get(q)
                    names.append(q)
    return names


def targets(platform: str, abis: list[str] | None = None):
    mod = get(platform)
    if not abis:
        return [mod.TARGETS[a] for a in mod.DEFAULT_ABIS]
    unknown = [a for a in abis if a not in mod.TARGETS]
    if unknown:
        raise ValueError(f"platform {platform} has no ABI {', '.join(unknown)}; known: {', '.join(mod.TARGETS)}")
    return [mod.TARGETS[a] for a in abis]


_VERSION = re.compile(r"^(\d+(?:\.\d+){0,3})([-+.][0-9A-Za-z.+-]*)?$")


def check_package_version(version: str) -> str:
    """--package-version for AARs, prefab and CocoaPods: digits with an optional suffix
    (1.2.0, 1.2.0-rc1). Returns the numeric part (what prefab can hold)."""
    m = _VERSION.match(version)
    if not m:
        raise ValueError(f"--package-version {version!r}: expected a version such as 1.2.0 or 1.2.0-rc1")
    return m.group(1)

"""What every package records about the build it came from: the runtime version and
the hash of the manifest (so a shipped binary can be tied to its model set)."""

from __future__ import annotations

import json
import re

from . import __version__, resources


def runtime_version() -> str:
    """minirt's version, from the MRT_VERSION_* defines of its public header (the
    one place the C runtime states it; mrt_version() returns the same string)."""
    text = resources.path("kernels_src", "include", "minirt.h").read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define MRT_VERSION_{part} (\d+)\s*$", text, re.M)
        if not m:
            raise RuntimeError(f"minirt.h has no MRT_VERSION_{part}")
        parts.append(m.group(1))
    return ".".join(parts)


def build_info(ctx, **extra) -> dict:
    """The build facts a package carries (ctx: platforms.PackageContext)."""
    info = {
        "runtime": "minirt",
        "runtime_version": runtime_version(),
        "manifest_hash": ctx.scan.manifest.hash,
        "models": sorted(m.name for m in ctx.scan.models),
        "minibuild_version": __version__,
    }
    info.update(extra)
    return info


def to_json(info: dict) -> bytes:
    return (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()

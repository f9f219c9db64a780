"""Python wheels of the `minirt` binding (ctypes + numpy) with the reduced library inside.

The binding calls the C API through ctypes, so a wheel depends on no CPython ABI:
`py3-none-<platform>`. The Linux wheels carry linux.py's own libraries (glibc 2.17
= manylinux2014); when `--platform linux,python` (or `all`) asks for both, the
pipeline compiles them once. macOS dylibs are linked by zig against its bundled
libSystem stubs.

    OUT/dist/minirt-<version>-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
    OUT/dist/minirt-<version>-py3-none-macosx_11_0_arm64.whl  ...
    OUT/dist/python-sizes.json
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import buildinfo, resources, toolchain, wheel
from ..fsutil import write_if_changed
from ..toolchain import Target
from . import linux

MACOS_MIN = {"arm64": "11.0", "x86_64": "10.15"}

# _FORTIFY_SOURCE=0: Apple's string.h turns memcpy/memset into checked macros
# when optimising, which clash with mrt_kernel.h's own declarations.
_MACOS_CFLAGS = ("-D_FORTIFY_SOURCE=0",)
TARGETS = {
    "x86_64": linux.TARGETS["x86_64"],
    "aarch64": linux.TARGETS["aarch64"],
    "macos-arm64": Target("python", "macos-arm64", f"aarch64-macos.{MACOS_MIN['arm64']}", _MACOS_CFLAGS,
                          library="libminirt.dylib"),
    "macos-x86_64": Target("python", "macos-x86_64", f"x86_64-macos.{MACOS_MIN['x86_64']}", _MACOS_CFLAGS,
                           library="libminirt.dylib"),
}
DEFAULT_ABIS = ["x86_64", "aarch64", "macos-arm64", "macos-x86_64"]

# Target name -> wheel platform tags (the first is the canonical one).
PLATFORM_TAGS = {
    "linux-x86_64": ["manylinux_2_17_x86_64", "manylinux2014_x86_64"],
    "linux-aarch64": ["manylinux_2_17_aarch64", "manylinux2014_aarch64"],
    "python-macos-arm64": ["macosx_11_0_arm64"],
    "python-macos-x86_64": ["macosx_10_15_x86_64"],
}


def link_steps(target: Target, tdir: Path) -> list[dict]:
    """macOS dylibs (the Linux targets link through linux.link_steps). zig's Mach-O
    linker takes an exported-symbols list, dead-strips and signs arm64 ad hoc;
    like the Linux link it runs twice: with symbols, then stripped. No link map is
    asked for: the size report attributes Mach-O images by symbols."""
    exports = tdir / "exports.txt"
    write_if_changed(exports, "".join(f"_{s}\n" for s in sorted(toolchain.C_API)))
    # -nostdlib -lc: libSystem only, no compiler-rt (the runtime needs none, and
    # building it costs a cold zig cache ~15 s per arch).
    cmd = [*toolchain.ZIG, "cc", "-target", target.triple, "-shared", "-o", "$TARGET", "$SOURCES",
           "-nostdlib", "-lc", f"-Wl,-exported_symbols_list,{exports}", "-Wl,-dead_strip",
           f"-Wl,-install_name,@rpath/{target.library}"]
    return [{"output": f"lib/{target.library}.debug", "role": "unstripped", "command": cmd, "verb": "LINK",
             "inputs": [str(exports)]},
            {"output": f"lib/{target.library}", "role": "deliverable", "command": cmd + ["-s"], "verb": "LINK",
             "inputs": [str(exports)]}]


def binding_files() -> dict[str, bytes]:
    """The pure-Python part of the `minirt` package (packaging/python/minirt/*.py)."""
    root = resources.path("packaging", "python", "minirt")
    return {f"minirt/{p.name}": p.read_bytes() for p in sorted(root.glob("*.py"))}


def wheel_spec(version: str, tags: list[str], info: dict) -> wheel.WheelSpec:
    desc = (f"# minirt\n\nThe minirt inference runtime {info['runtime_version']}, size-reduced by minibuild "
            f"for one set of models.\n\n- manifest hash: `{info['manifest_hash']}`\n"
            f"- models: {', '.join(info['models']) or '-'}\n\n"
            "```python\nimport minirt\nsess = minirt.InferenceSession(\"model.mrt\")\n"
            "(y,) = sess.run(None, {sess.get_inputs()[0].name: x})\n```\n")
    return wheel.WheelSpec(
        name="minirt", version=version, platform_tags=tags,
        summary="Size-reduced ONNX inference runtime built by minibuild (ctypes binding)",
        requires_dist=["numpy"], requires_python=">=3.8", license="Apache-2.0",
        keywords=["onnx", "inference", f"manifest-{info['manifest_hash'][:16]}"], description=desc)


def wheel_version(opts) -> str:
    """--package-version as the wheel's PEP 440 version, normalised (1.2.0-rc1 -> 1.2.0rc1)."""
    from packaging.version import InvalidVersion, Version
    given = getattr(opts, "package_version", None) or buildinfo.runtime_version()
    try:
        return str(Version(given))
    except InvalidVersion:
        raise ValueError(f"--package-version {given!r}: not a PEP 440 version, which wheels need "
                         "(e.g. 1.2.0, 1.2.0rc1, 1.2.0.post1)") from None


def check_options(opts) -> None:
    wheel_version(opts)


def package(ctx) -> list[Path]:
    if not ctx.builds:
        return []
    from ..console import console
    dist = ctx.out / "dist"
    version = wheel_version(ctx.opts)
    out, sizes = [], {}
    for tb in sorted(ctx.builds, key=lambda b: b.target.name):
        tags = PLATFORM_TAGS[tb.target.name]
        info = buildinfo.build_info(ctx, platform="python", wheel_platform=tags[0], target=tb.target.triple)
        lib = tb.library.read_bytes()
        files = binding_files()
        files[f"minirt/{tb.target.library}"] = lib
        files["minirt/_build_info.json"] = buildinfo.to_json(info)
        spec = wheel_spec(version, tags, info)
        data = wheel.build(spec, files, executable=[f"minirt/{tb.target.library}"])
        # A wheel of another version for this platform would be picked up by `dist/*.whl`.
        for old in dist.glob(f"minirt-*-py3-none-{'.'.join(tags)}.whl"):
            if old.name != spec.filename:
                old.unlink()
        out.append(write_if_changed(dist / spec.filename, data))
        sizes[spec.filename] = len(data)
        sizes[f"{spec.filename}:minirt/{tb.target.library}"] = len(lib)
    out.append(write_if_changed(dist / "python-sizes.json", json.dumps(sizes, indent=2, sort_keys=True) + "\n"))
    console.print(f"[bold]python[/] {len(ctx.builds)} wheel(s): " + ", ".join(p.name for p in out[:-1]))
    return out

"""Linux (glibc 2.17, i.e. manylinux2014-compatible) shared libraries for x86_64 and aarch64."""

from __future__ import annotations

from pathlib import Path

from .. import actions, archive, buildinfo, resources, toolchain
from ..fsutil import write_if_changed
from ..toolchain import Target

TARGETS = {
    "x86_64": Target("linux", "x86_64", "x86_64-linux-gnu.2.17"),
    "aarch64": Target("linux", "aarch64", "aarch64-linux-gnu.2.17"),
}
DEFAULT_ABIS = ["x86_64", "aarch64"]


def link_steps(target: Target, tdir: Path) -> list[dict]:
    return toolchain.zig_shared_link_steps(target, tdir)


def _copy(src: Path, dst: Path) -> Path:
    return write_if_changed(dst, Path(src).read_bytes())


def package(ctx) -> list[Path]:
    """OUT/linux/<abi>/: lib/, include/, models/, python/minirt/ (use with PYTHONPATH=.../python),
    build_info.json; and the same folder as a reproducible OUT/dist/minirt-linux-<abi>.tar.gz."""
    files = []
    for tb in ctx.builds:
        root = ctx.out / "linux" / tb.target.abi
        info = buildinfo.build_info(ctx, platform="linux", abi=tb.target.abi, target=tb.target.triple)
        files.append(write_if_changed(root / "build_info.json", buildinfo.to_json(info)))
        files.append(_copy(tb.library, root / "lib" / tb.library.name))
        files.append(_copy(resources.path("kernels_src", "include", "minirt.h"), root / "include" / "minirt.h"))
        for name, path in sorted(ctx.model_files.items()):
            files.append(_copy(path, root / "models" / path.name))
        for f in sorted(resources.path("packaging", "python", "minirt").glob("*.py")):
            files.append(_copy(f, root / "python" / "minirt" / f.name))
        files.append(_copy(tb.library, root / "python" / "minirt" / tb.library.name))
        name = f"minirt-linux-{tb.target.abi}"
        mine = [f for f in files if root in f.parents]
        tree = {f"{name}/{f.relative_to(root).as_posix()}": f.read_bytes() for f in mine}
        files.append(write_if_changed(ctx.out / "dist" / f"{name}.tar.gz",
                                      actions.archive(f"{name}.tar.gz", archive.tar_gz_bytes, tree,
                                                      executable=[f"{name}/lib/{tb.library.name}"])))
    return files

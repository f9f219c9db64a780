"""Package: lay out each platform's deliverable from the built libraries and converted models."""

from __future__ import annotations

from pathlib import Path

from . import resources
from .fsutil import write_if_changed


def _copy(src: Path, dst: Path) -> Path:
    return write_if_changed(dst, Path(src).read_bytes())


def package_linux(tb, model_files: dict[str, Path], out: Path) -> list[Path]:
    """OUT/linux/<abi>/: lib/, include/, models/, python/minirt/ (PYTHONPATH=python)."""
    root = out / "linux" / tb.target.abi
    files = [_copy(tb.library, root / "lib" / tb.library.name),
             _copy(resources.path("kernels_src", "include", "minirt.h"), root / "include" / "minirt.h")]
    for name, path in sorted(model_files.items()):
        files.append(_copy(path, root / "models" / path.name))
    pkg_src = resources.path("packaging", "python", "minirt")
    for f in sorted(pkg_src.glob("*.py")):
        files.append(_copy(f, root / "python" / "minirt" / f.name))
    files.append(_copy(tb.library, root / "python" / "minirt" / tb.library.name))
    return files


PACKAGERS = {"linux": package_linux}


def package_all(opts, result, model_files, builds, out: Path) -> dict[str, list[Path]]:
    outputs = {}
    for tb in builds:
        packager = PACKAGERS[tb.target.platform]
        outputs[tb.target.name] = packager(tb, model_files, out)
    return outputs

"""Where the build inputs live: inside the installed package, or in the checkout."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent
_INSTALLED = _PKG / "_assets"
_CHECKOUT = _PKG.parent

ASSETS = ("SConstruct", "site_scons", "ops_registry", "templates", "kernels_src", "packaging")


def root() -> Path:
    """The folder holding SConstruct, ops_registry/, templates/, kernels_src/, packaging/."""
    for candidate in (_INSTALLED, _CHECKOUT):
        if (candidate / "SConstruct").is_file() and (candidate / "ops_registry").is_dir():
            return candidate
    raise FileNotFoundError(
        f"minibuild's build inputs (SConstruct, ops_registry/, ...) are missing from {_PKG}; "
        "reinstall minibuild with `pip install .`"
    )


def path(*parts: str) -> Path:
    return root().joinpath(*parts)

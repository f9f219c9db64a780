"""Install like a tool: a regular (non-editable) `pip install .` into a fresh venv,
then `minibuild` from an unrelated working directory. The installed package must
carry SConstruct, site_scons/, ops_registry/, templates/, kernels_src/, packaging/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    res = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(REPO)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return venv


def test_installed_tool_builds_from_any_folder(installed, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    exe = installed / "bin" / "minibuild"
    res = subprocess.run([str(exe), "--models", str(REPO / "examples" / "models"), "--platform", "linux",
                          "--abi", "x86_64", "--out", "out"], cwd=work, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert (work / "out" / "linux" / "x86_64" / "lib" / "libminirt.so").is_file()
    assert (work / "out" / "manifest" / "required_ops.yaml").is_file()
    where = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import minibuild.resources as r; print(r.root())"], cwd=work, capture_output=True, text=True)
    root = Path(where.stdout.strip())
    assert str(root).startswith(str(installed)), root          # not the checkout
    for name in ("SConstruct", "site_scons", "ops_registry", "templates", "kernels_src", "packaging"):
        assert (root / name).exists(), name

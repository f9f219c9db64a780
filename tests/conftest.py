"""Shared fixtures: models made by the tests, and builds shared across a session."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402

from minibuild import toolchain  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def light_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("light")
    for p in models.light_model_paths():
        shutil.copy(p, d)
    return d


@pytest.fixture(scope="session")
def mobilenet_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("mobilenet")
    onnx.save(models.mobilenet_v2(), str(d / "mobilenet_v2.onnx"))
    return d


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("classifier")
    onnx.save(models.small_classifier(), str(d / "small_classifier.onnx"))
    return d


# the /proc/cpuinfo flag each x86_64 MINIRT_MAX_CPU_ISA family needs (AVX-VNNI and AVX-512
# VNNI are separate features: AMD Zen 4 has only the second)
_ISA_CPU_FLAGS = {"avx2": "avx2", "avxvnni": "avx_vnni", "avx512vnni": "avx512_vnni"}


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split())


@pytest.fixture
def isa(request, monkeypatch):
    """MINIRT_MAX_CPU_ISA capped to the parametrised value (None: no cap), so a test
    runs each micro-kernel family: @pytest.mark.parametrize("isa", [...], indirect=True).
    A family this CPU lacks is skipped: the cap would run the family below it, which
    has its own case."""
    flag = _ISA_CPU_FLAGS.get(request.param)
    if flag and flag not in _cpu_flags():
        pytest.skip(f"this CPU has no {flag}: the {request.param} family runs where it does")
    if request.param:
        monkeypatch.setenv("MINIRT_MAX_CPU_ISA", request.param)
    else:
        monkeypatch.delenv("MINIRT_MAX_CPU_ISA", raising=False)
    return request.param


def build(models_dir: Path, out: Path, abis=None, **kw):
    opts = Options(models=Path(models_dir), out=Path(out), platforms=["linux"],
                   abis=abis or [toolchain.host_abi()], **kw)
    return run_build(opts)


@pytest.fixture(scope="session")
def light_build(light_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("light-out")
    return build(light_dir, out)


@pytest.fixture(scope="session")
def mobilenet_build(mobilenet_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mobilenet-out")
    return build(mobilenet_dir, out)

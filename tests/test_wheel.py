"""The `minirt` wheels: file names and tags, WHEEL/METADATA/RECORD, build info,
`auditwheel show` says manylinux_2_17, macOS dylibs export only the C API, and the
host wheel installs into a fresh venv and matches onnxruntime."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from minibuild import archive, pipeline, toolchain
from models import small_classifier
from mobilenet_like import input_data, model, shared_build

V = "0.1.0"
WHEELS = {
    "x86_64": f"minirt-{V}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "aarch64": f"minirt-{V}-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "macos-arm64": f"minirt-{V}-py3-none-macosx_11_0_arm64.whl",
    "macos-x86_64": f"minirt-{V}-py3-none-macosx_10_15_x86_64.whl",
}


@pytest.fixture(scope="module")
def built():
    models, out, res, _ = shared_build()
    return out, res


def _read(whl: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(whl) as zf:
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())
        return {i.filename: zf.read(i) for i in zf.infolist()}


@pytest.mark.parametrize("abi", sorted(WHEELS))
def test_wheel_metadata_and_record(built, abi):
    out, res = built
    whl = out / "dist" / WHEELS[abi]
    files = _read(whl)
    di = f"minirt-{V}.dist-info"
    wheel_txt = files[f"{di}/WHEEL"].decode()
    assert "Root-Is-Purelib: false" in wheel_txt
    tags = [l.split(": ", 1)[1] for l in wheel_txt.splitlines() if l.startswith("Tag: ")]
    platforms = WHEELS[abi][:-4].split("-")[-1].split(".")
    assert tags == [f"py3-none-{p}" for p in platforms]
    meta = files[f"{di}/METADATA"].decode()
    assert f"Name: minirt\nVersion: {V}\n" in meta and "Requires-Dist: numpy" in meta
    assert res.scan.manifest.hash in meta
    # RECORD lists every other file with its urlsafe-b64 sha256 (no padding) and size
    rows = [r.split(",") for r in files[f"{di}/RECORD"].decode().splitlines()]
    assert [f"{di}/RECORD", "", ""] in rows
    listed = {r[0] for r in rows}
    assert listed == set(files)
    for name, h, size in rows:
        if name == f"{di}/RECORD":
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
        assert h == f"sha256={digest}" and int(size) == len(files[name]), name
    info = json.loads(files["minirt/_build_info.json"])
    assert info["manifest_hash"] == res.scan.manifest.hash and info["runtime_version"] == V
    assert info["wheel_platform"] == platforms[0]
    assert "minirt/__init__.py" in files
    # the wheel package's own reader accepts it (it checks RECORD hashes on read)
    wheelfile = pytest.importorskip("wheel.wheelfile")
    with wheelfile.WheelFile(whl) as wf:
        for name in files:
            if not name.endswith("RECORD"):
                wf.read(name)


@pytest.mark.parametrize("abi", ["x86_64", "aarch64"])
def test_auditwheel_manylinux_2_17(built, abi):
    exe = shutil.which("auditwheel") or str(Path(sys.executable).parent / "auditwheel")
    if not os.path.exists(exe):
        pytest.skip("auditwheel is not installed")
    r = subprocess.run([exe, "show", str(built[0] / "dist" / WHEELS[abi])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert f'is consistent with the following platform tag: "manylinux_2_17_{abi}"' in text, r.stdout


def test_linux_wheels_reuse_the_linux_libraries(built):
    out, _ = built
    for abi in ("x86_64", "aarch64"):
        lib = _read(out / "dist" / WHEELS[abi])["minirt/libminirt.so"]
        assert lib == (out / "linux" / abi / "lib" / "libminirt.so").read_bytes()


@pytest.mark.parametrize("arch,cpu,minos", [("arm64", 0x0100000C, "11.0"), ("x86_64", 0x01000007, "10.15")])
def test_macos_dylib(built, arch, cpu, minos):
    lib = _read(built[0] / "dist" / WHEELS[f"macos-{arch}"])["minirt/libminirt.dylib"]
    m = archive.macho_info(lib)
    assert m["cputype"] == cpu and m["filetype"] == 6  # MH_DYLIB
    assert m["platform"] == 1 and m["minos"] == minos  # PLATFORM_MACOS
    exported = {n for n, t in m["symbols"] if t & 0x01 and (t & 0x0E) == 0x0E}
    # the C API, plus the linker's own __mh_dylib_header / ___dso_handle
    assert exported - {"__mh_dylib_header", "___dso_handle"} == {"_" + s for s in toolchain.C_API}


def test_sizes_json(built):
    dist = built[0] / "dist"
    sizes = json.loads((dist / "python-sizes.json").read_text())
    for name in WHEELS.values():
        assert sizes[name] == (dist / name).stat().st_size


@pytest.mark.skipif(toolchain.host_abi() != "x86_64" or sys.platform != "linux", reason="needs a linux x86_64 host")
def test_wheel_installs_into_fresh_venv_and_matches_onnxruntime(built, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["--no-deps", str(out / "dist" / WHEELS["x86_64"])], check=True)
    r = subprocess.run(pip + [f"numpy=={np.__version__}"], capture_output=True, text=True)
    if r.returncode != 0:  # offline: lend the venv this interpreter's numpy
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "host_numpy.pth").write_text(str(Path(np.__file__).parent.parent) + "\n")
    x = input_data()
    np.save(tmp_path / "x.npy", x)
    mrt = out / "models" / "mobilenet_like.mrt"
    script = (
        "import json, sys, numpy as np, minirt\n"
        f"s = minirt.InferenceSession({str(mrt)!r})\n"
        f"(y,) = s.run(None, {{s.get_inputs()[0].name: np.load({str(tmp_path / 'x.npy')!r})}})\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        "print(json.dumps({'file': minirt.__file__, 'hash': minirt.manifest_hash(), 'info': minirt.build_info()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MINIRT_LIBRARY", "PYTHONPATH")}
    r = subprocess.run([str(py), "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(venv))
    assert got["hash"] == got["info"]["manifest_hash"]
    want = ort.InferenceSession(model().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4)


def test_package_version_names_the_wheel(tmp_path):
    """--package-version is the wheel's version, PEP 440-normalised; a rebuild at another
    version replaces the wheel; a version pip cannot read fails before compiling."""
    models = tmp_path / "models"
    models.mkdir()
    onnx.save(small_classifier(), models / "m.onnx")
    out = tmp_path / "out"
    tag = "manylinux_2_17_x86_64.manylinux2014_x86_64"
    for version, expect in (("2.0.0-rc1", "2.0.0rc1"), ("2.0.1", "2.0.1")):
        pipeline.run_build(pipeline.Options(models=models, out=out, platforms=["python"], abis=["x86_64"],
                                            package_version=version))
        assert [p.name for p in (out / "dist").glob("*.whl")] == [f"minirt-{expect}-py3-none-{tag}.whl"]
        meta = _read(out / "dist" / f"minirt-{expect}-py3-none-{tag}.whl")[f"minirt-{expect}.dist-info/METADATA"]
        assert f"\nVersion: {expect}\n".encode() in meta
    with pytest.raises(ValueError, match="PEP 440"):
        pipeline.run_build(pipeline.Options(models=models, out=tmp_path / "bad", platforms=["python"],
                                            abis=["x86_64"], package_version="2.0 beta"))
    assert not (tmp_path / "bad" / "build").exists()

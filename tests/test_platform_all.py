"""Several platforms in one run: one scan/optimise/codegen, targets shared between
platforms compiled once (python's wheels reuse linux's libraries), a rebuild that
does no work, reproducible Linux tarballs, and `--platform all`."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import time

import pytest

from minibuild import pipeline, platforms
from mobilenet_like import shared_build


@pytest.fixture(scope="module")
def built():
    return shared_build()


def _dist_state(out):
    return {p.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted((out / "dist").rglob("*")) if p.is_file()}


def test_shared_targets_compile_once(built):
    _, out, res, _ = built
    names = [tb.target.name for tb in res.targets]
    assert len(names) == len(set(names))
    assert {"linux-x86_64", "linux-aarch64", "ios-arm64", "ios-arm64-simulator", "ios-x86_64-simulator",
            "python-macos-arm64", "python-macos-x86_64"} == set(names)
    links = [l for l in res.steps_run if re.search(r"\bLINK\s+lib/libminirt\.so \[linux-x86_64\]", l)]
    assert len(links) <= 1, links
    assert set(res.outputs) == {"linux", "ios", "python"}
    assert (out / "dist" / "minirt-linux-x86_64.tar.gz").is_file()
    assert (out / "dist" / "MiniRT.xcframework.zip").is_file()
    assert (out / "dist" / "python-sizes.json").is_file()


def test_linux_tarball_is_reproducible_and_records_the_build(built):
    _, out, res, _ = built
    data = (out / "dist" / "minirt-linux-x86_64.tar.gz").read_bytes()
    assert data[4:8] == b"\0\0\0\0", "gzip header mtime must be 0"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tf:
        members = tf.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.gname == "" for m in members)
        info = json.load(tf.extractfile("minirt-linux-x86_64/build_info.json"))
        lib = tf.extractfile("minirt-linux-x86_64/lib/libminirt.so").read()
    assert info["manifest_hash"] == res.scan.manifest.hash and info["runtime_version"] == "0.1.0"
    assert lib == (out / "linux" / "x86_64" / "lib" / "libminirt.so").read_bytes()
    assert "minirt-linux-x86_64/models/mobilenet_like.mrt" in names


def test_immediate_rebuild_does_no_work(built):
    models, out, _, _ = built
    before = _dist_state(out)
    t0 = time.monotonic()
    res = pipeline.run_build(pipeline.Options(models=models, out=out, platforms=["linux,ios,python"]))
    elapsed = time.monotonic() - t0
    assert res.steps_run == []
    assert _dist_state(out) == before, "an unchanged build must not rewrite any package"
    print(f"no-op rebuild of linux,ios,python: {elapsed:.1f}s")


def test_platform_all(built):
    models, out, _, _ = built
    try:
        platforms.get("android")
    except ValueError:
        pytest.skip("the android platform is not available in this tree")
    ios_zip = (out / "dist" / "MiniRT.xcframework.zip").read_bytes()
    res = pipeline.run_build(pipeline.Options(models=models, out=out, platforms=["all"]))
    assert list(res.outputs) == list(platforms.ALL)
    assert all(res.outputs[p] for p in platforms.ALL)
    # only android had anything left to compile
    compiled = [l for l in res.steps_run if re.search(r"\[(\S+)\]\s*$", l)]
    assert all("[android-" in l for l in compiled), compiled
    assert (out / "dist" / "MiniRT.xcframework.zip").read_bytes() == ios_zip

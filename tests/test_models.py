"""Whole models, built and run as a user would: `minibuild` then `minibuild verify`."""

from __future__ import annotations

import json

import pytest

from minibuild import cli, toolchain


def _verify(models_dir, out, tmp_path, runs=1):
    report = tmp_path / "verify.json"
    rc = cli.main(["verify", "--models", str(models_dir), "--out", str(out), "--json", str(report), "--runs", str(runs)])
    doc = json.loads(report.read_text())
    return rc, doc


def test_light_models_match_onnxruntime(light_build, light_dir, tmp_path):
    rc, doc = _verify(light_dir, light_build.targets[0].dir.parent.parent, tmp_path)
    names = sorted(m["model"] for m in doc["models"])
    assert len(names) == 9, names
    for m in doc["models"]:
        assert m["randomized_weights"] > 0, f"{m['model']}: constant-filled weights must be randomised"
        for o in m["outputs"]:
            assert o["ok"], (m["model"], o)
            assert o["max_abs_err"] <= doc["atol"] + doc["rtol"] * o["ref_max_abs"]
    assert rc == 0


def test_mobilenet_v2_matches_onnxruntime(mobilenet_build, mobilenet_dir, tmp_path):
    rc, doc = _verify(mobilenet_dir, mobilenet_build.targets[0].dir.parent.parent, tmp_path)
    (m,) = doc["models"]
    (o,) = m["outputs"]
    assert o["shape"] == [1, 1000]
    assert o["ok"] and rc == 0, o


def test_mobilenet_manifest_is_exactly_what_runs(mobilenet_build):
    """After folding Clip into FusedConv, the manifest holds no Clip and no plain Conv
    that the graph no longer has: the op set is what the runtime is asked for."""
    entries = {(e.domain, e.op) for e in mobilenet_build.scan.manifest.entries}
    nodes = {(n.domain or "ai.onnx", n.op_type) for m in mobilenet_build.scan.models for n in m.graph.nodes}
    assert entries == nodes
    assert ("ai.onnx", "Clip") not in entries
    assert ("ai.minibuild", "FusedConv") in entries


def test_classifier_matches_onnxruntime(classifier_dir, tmp_path):
    from conftest import build
    out = tmp_path / "out"
    build(classifier_dir, out)
    rc, doc = _verify(classifier_dir, out, tmp_path)
    (m,) = doc["models"]
    assert m["outputs"][0]["ok"] and rc == 0


def test_python_package_imports_from_linux_output(mobilenet_build, tmp_path):
    """`PYTHONPATH=OUT/linux/<abi>/python python -c "import minirt"` works, and runs a model."""
    import subprocess
    import sys
    out = mobilenet_build.targets[0].dir.parent.parent
    root = out / "linux" / toolchain.host_abi()
    code = ("import minirt, numpy as np; s = minirt.InferenceSession('%s');"
            "i = s.get_inputs()[0]; y = s.run(None, {i.name: np.zeros(i.shape, np.float32)})[0];"
            "print(i.name, i.shape, y.shape, minirt.manifest_hash())") % (root / "models" / "mobilenet_v2.mrt")
    env = {"PYTHONPATH": str(root / "python"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == "input"
    assert res.stdout.strip().endswith(mobilenet_build.scan.manifest.hash)
    assert (root / "include" / "minirt.h").is_file()
    assert (root / "lib" / "libminirt.so").is_file()


@pytest.mark.parametrize("bad", ["missing-input", "wrong-shape"])
def test_binding_rejects_bad_feeds(mobilenet_build, bad):
    import numpy as np
    from minibuild.verify import import_minirt
    minirt = import_minirt(mobilenet_build.targets[0].dir.parent.parent)
    s = minirt.InferenceSession(mobilenet_build.model_files["mobilenet_v2"])
    with pytest.raises(ValueError, match="input"):
        if bad == "missing-input":
            s.run(None, {})
        else:
            s.run(None, {"input": np.zeros((1, 3, 10, 10), np.float32)})


def test_tune_size_compiles_every_object_for_size_and_still_matches(mobilenet_build, mobilenet_dir, tmp_path):
    """--tune size: every compile is -Os (none -O2), config.h says MRT_TUNE_SIZE 1 and
    leaves the thread pool out, the library is smaller than the default --tune speed
    one, and MobileNetV2 still matches onnxruntime."""
    out = tmp_path / "out"
    assert cli.main(["--models", str(mobilenet_dir), "--out", str(out), "--abi", toolchain.host_abi(),
                     "--tune", "size"]) == 0
    plans = {o: json.loads((o / "build" / "plan.json").read_text())
             for o in (out, mobilenet_build.targets[0].dir.parent.parent)}
    flags = {o: [f for t in p["targets"] for obj in t["objects"] for f in obj["flags"]] for o, p in plans.items()}
    assert "-O2" not in flags[out] and "-Os" in flags[out]
    default_out = mobilenet_build.targets[0].dir.parent.parent
    assert "-O2" in flags[default_out]  # the speed kernels (GEMM, Conv) of the default build
    size_cfg, speed_cfg = ((o / "build" / "gen" / "config.h").read_text() for o in (out, default_out))
    assert "#define MRT_TUNE_SIZE 1" in size_cfg and "#define MRT_ENABLE_THREADS 0" in size_cfg
    assert "#define MRT_TUNE_SIZE 0" in speed_cfg and "#define MRT_ENABLE_THREADS 1" in speed_cfg
    lib = f"linux/{toolchain.host_abi()}/lib/libminirt.so"
    assert (out / lib).stat().st_size < (default_out / lib).stat().st_size
    if toolchain.host_abi() == "x86_64":  # the AVX-512 GEMM tiles are speed-only
        def avx512(o):
            from elftools.elf.elffile import ELFFile
            with open(o / "build" / "linux-x86_64" / "lib" / "libminirt.so.debug", "rb") as f:
                return [s.name for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols() if "avx512" in s.name]
        assert avx512(default_out) and not avx512(out)
    rc, doc = _verify(mobilenet_dir, out, tmp_path)
    assert rc == 0 and doc["models"][0]["outputs"][0]["ok"]


def test_tune_size_with_threads_keeps_the_pool(classifier_dir, tmp_path):
    out = tmp_path / "out"
    assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--abi", toolchain.host_abi(),
                     "--tune", "size", "--threads"]) == 0
    assert "#define MRT_ENABLE_THREADS 1" in (out / "build" / "gen" / "config.h").read_text()


def test_tune_rejects_an_unknown_value(mobilenet_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--models", str(mobilenet_dir), "--out", str(tmp_path / "o"), "--tune", "fast"])
    assert "invalid choice: 'fast'" in capsys.readouterr().err

"""The action cache (minibuild/cache.py): compile results shared between build
folders, keyed by everything a compile reads, verified on every read."""

from __future__ import annotations

import json

import pytest

from minibuild import cli
from minibuild.cache import LocalCache, action_key


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("MINIBUILD_CACHE", str(d))
    monkeypatch.setenv("ZIG_GLOBAL_CACHE_DIR", str(tmp_path / "zig"))   # zig's own cache stays out of the way
    monkeypatch.setenv("ZIG_LOCAL_CACHE_DIR", str(tmp_path / "zig-local"))
    return d


def _actions(out, python=False):
    """The SCons actions of the last build (and with `python`, minibuild's own: codegen,
    convert, javac, package)."""
    logs = ("actions.jsonl", "python-actions.jsonl") if python else ("actions.jsonl",)
    return [json.loads(line) for log in logs for line in (out / "build" / log).read_text().splitlines()]


def _build(models, out, *extra):
    assert cli.main(["--models", str(models), "--out", str(out), "--abi", "x86_64", *extra]) == 0


def test_a_second_folder_gets_every_object_from_the_cache(tmp_path, classifier_dir, cache_dir, capsys):
    _build(classifier_dir, tmp_path / "a")
    first = [a for a in _actions(tmp_path / "a") if a["name"].startswith("compile ")]
    assert first and all(a["cache"] == "miss" for a in first)
    _build(classifier_dir, tmp_path / "b" / "deeper")
    second = [a for a in _actions(tmp_path / "b" / "deeper") if a["name"].startswith("compile ")]
    assert len(second) == len(first) and all(a["cache"] == "hit-local" for a in second)
    everything = _actions(tmp_path / "b" / "deeper", python=True)     # links and packages too (test below)
    assert f"({len(everything)} from the local cache" in capsys.readouterr().err
    # Objects from the cache are the compiler's bytes: the libraries are identical.
    lib = "linux/x86_64/lib/libminirt.so"
    assert (tmp_path / "a" / lib).read_bytes() == (tmp_path / "b" / "deeper" / lib).read_bytes()
    stats = LocalCache(cache_dir).stats()
    # a compile is stored under its scanned key and its preprocessed key (zigcc.py)
    assert stats["ac"]["entries"] == len(everything) + len(first) and stats["cas"]["entries"] >= len(first) - 1


def test_a_flag_change_or_a_header_change_misses(tmp_path, classifier_dir, cache_dir):
    _build(classifier_dir, tmp_path / "a")
    _build(classifier_dir, tmp_path / "b", "--no-messages")   # config.h differs: the runtime recompiles
    acts = {a["output"].split("/obj/", 1)[1]: a["cache"] for a in _actions(tmp_path / "b") if a["name"].startswith("compile ")}
    assert acts["runtime/status.o"] == "miss" and acts["runtime/kernel_ctx.o"] == "miss"
    assert acts["kernels/MaxPool__float32.o"] == "hit-local"  # kernels do not read config.h


def test_a_corrupt_entry_is_refused_and_rebuilt(tmp_path, classifier_dir, cache_dir):
    _build(classifier_dir, tmp_path / "a")
    for blob in (cache_dir / "cas").rglob("*"):
        if blob.is_file():
            blob.write_bytes(b"\x7fELF poisoned")     # same name, other bytes: the hash no longer matches
    _build(classifier_dir, tmp_path / "b")
    compiles = [a for a in _actions(tmp_path / "b") if a["name"].startswith("compile ")]
    assert all(a["cache"] == "miss" for a in compiles)
    lib = "linux/x86_64/lib/libminirt.so"
    assert (tmp_path / "a" / lib).read_bytes() == (tmp_path / "b" / lib).read_bytes()


def test_cache_off(tmp_path, classifier_dir, cache_dir, monkeypatch):
    monkeypatch.setenv("MINIBUILD_NO_CACHE", "1")
    _build(classifier_dir, tmp_path / "a")
    assert {a["cache"] for a in _actions(tmp_path / "a", python=True)} == {"off"}
    assert not (cache_dir / "ac").exists()


def test_local_cache_unit(tmp_path):
    c = LocalCache(tmp_path)
    k = action_key("compile", "x", b"\x00")
    assert k != action_key("compilex", "", b"\x00")    # parts are length-prefixed
    assert c.get(k) is None
    c.put(k, {"object": b"abc", "map": b""})
    assert c.get(k) == {"object": b"abc", "map": b""}
    blob = next(p for p in (tmp_path / "cas").rglob("*") if p.is_file() and p.stat().st_size == 3)
    blob.write_bytes(b"abd")
    assert c.get(k) is None and not blob.exists()
    c.put(k, {"object": b"abc"})
    assert c.gc(0)["bytes"] == 0 and c.get(k) is None


def _tree(out):
    """Every artifact of a build (not its intermediate folder), by relative path."""
    return {str(p.relative_to(out)): p.read_bytes() for sub in ("models", "manifest", "dist")
            for p in sorted((out / sub).rglob("*")) if p.is_file()}


def _report(out):
    """size_report.json without what names the build's own folder or time."""
    doc = json.loads((out / "size_report.json").read_text().replace(str(out), "<out>"))
    for k in ("generated", "baseline"):
        doc.pop(k, None)
    return doc


def test_a_clean_folder_with_a_warm_cache_executes_no_action(tmp_path, classifier_dir, cache_dir, capsys):
    """Links, stubs, compiler_rt and maps are cached actions too: a second output folder
    runs nothing, and its artifacts (the AAR), linker map and size report equal a cold
    build's. Android: its map names an object by absolute path (compiler_rt)."""
    def android(out):
        assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--platform", "android",
                         "--abi", "arm64-v8a"]) == 0
    android(tmp_path / "a")
    cold = _actions(tmp_path / "a", python=True)
    kinds = {a["name"].split(" ", 1)[0] for a in cold}
    assert {"compile", "link", "rt", "stub", "codegen", "convert", "javac", "package"} <= kinds, kinds
    assert all(a["cache"] == "miss" for a in cold), [a for a in cold if a["cache"] != "miss"]
    capsys.readouterr()
    android(tmp_path / "b")
    warm = _actions(tmp_path / "b", python=True)
    assert sorted(a["name"] for a in warm) == sorted(a["name"] for a in cold)
    assert all(a["cache"] == "hit-local" for a in warm), [a for a in warm if a["cache"] != "hit-local"]
    assert f"({len(warm)} from the local cache, 0 from the remote cache, 0 executed)" in capsys.readouterr().err
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    # Restored outputs keep the modes the steps give them (a library or runner is executable).
    import os
    for rel in ("lib/libminirt.so", "lib/libminirt.so.debug", "stubs/libc.so", "stubs/libc.o", "rt/compiler_rt.o"):
        modes = [os.stat(tmp_path / d / "build" / "android-arm64-v8a" / rel).st_mode for d in "ab"]
        assert modes[0] == modes[1], (rel, oct(modes[0]), oct(modes[1]))
    # The map names this build's objects, as a fresh link here would.
    rel = "build/android-arm64-v8a/lib/libminirt.so.map"
    fresh, served = (tmp_path / "a" / rel).read_text(), (tmp_path / "b" / rel).read_text()
    assert str(tmp_path / "a") in fresh and str(tmp_path / "a") not in served
    assert served == fresh.replace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert _report(tmp_path / "a") == _report(tmp_path / "b")


def test_one_model_change_redoes_only_its_own_actions(tmp_path, classifier_dir, cache_dir):
    """Adding a model to a built set: its conversion and the kernels it adds run (and the
    kernel table, the links and the packages that hold them); the other model's
    conversion and every other object come from the cache or are up to date."""
    import shutil
    import onnx
    from onnx import TensorProto, helper
    models_dir = tmp_path / "models"
    shutil.copytree(classifier_dir, models_dir)
    _build(models_dir, tmp_path / "out")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])],
                          "ew", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(models_dir / "extra.onnx"))
    _build(models_dir, tmp_path / "out")
    acts = {a["name"]: a["cache"] for a in _actions(tmp_path / "out", python=True)}
    executed = sorted(n for n, c in acts.items() if c == "miss")
    compiled = sorted(n.rsplit("/", 1)[1] for n in executed if n.startswith("compile "))
    assert compiled == ["GlobalAveragePool__float32.o", "Relu__float32.o", "registry.o"], executed
    assert acts["convert extra.mrt"] == "miss" and acts["convert small_classifier.mrt"] == "hit-local"
    assert {n.split(" ", 1)[0] for n in executed} == {"compile", "link", "codegen", "convert", "package"}, executed


def test_two_builds_share_one_cache_at_once(tmp_path, classifier_dir, cache_dir):
    """Two processes building the same models into two folders with one cache at the
    same time: both succeed, with identical libraries (cache writes are renames, reads
    are verified)."""
    import os
    import subprocess
    import sys
    procs = [subprocess.Popen([sys.executable, "-m", "minibuild", "--models", str(classifier_dir), "--out",
                               str(tmp_path / name), "--abi", "x86_64", "-j", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
             for name in ("p", "q")]
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out.decode()[-2000:]
    lib = "linux/x86_64/lib/libminirt.so"
    assert (tmp_path / "p" / lib).read_bytes() == (tmp_path / "q" / lib).read_bytes()
    assert _tree(tmp_path / "p") == _tree(tmp_path / "q")


def test_a_second_build_into_a_busy_folder_waits_then_says_so(tmp_path, classifier_dir, cache_dir,
                                                                        monkeypatch, capsys):
    import fcntl
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".minibuild.lock", "a+") as held:     # another build holds the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        monkeypatch.setenv("MINIBUILD_LOCK_TIMEOUT", "0.5")
        assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--abi", "x86_64"]) == 1
        err = capsys.readouterr().err
        assert "waiting for another minibuild" in err and "another minibuild is building into this folder" in err
        assert not (out / "build").exists()      # it waited before writing anything
    _build(classifier_dir, out)                  # released: the build goes ahead

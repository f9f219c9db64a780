"""Fuzz what parses untrusted bytes: the .mrt loader (and, for models that still load
after mutation, prepare and run), under AddressSanitizer + UBSan with Debian's clang.
Also a quick in-process check that the shipped library rejects corrupt files cleanly."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

import models
from minibuild import build as build_mod, registry as registry_mod, resources, testing, toolchain
from minibuild.testing import convert_model

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def seed_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    reg = registry_mod.load()
    m = models.small_classifier()
    data, _ = convert_model(m, {"image": np.zeros((1, 3, 32, 32), np.float32)}, registry=reg)
    (d / "classifier.mrt").write_bytes(data)
    data, _ = convert_model(_windows_model(), {"x": np.zeros((1, 4, 13, 11), np.float32)}, registry=reg)
    (d / "windows.mrt").write_bytes(data)
    return d


def _windows_model():
    """The window-walking paths a mutated attribute can push off the edge: a padded,
    strided im2col Conv (zero-padded input copy), stride-1 MaxPool and AveragePool
    (padded-plane flat form), a stride-2 depthwise Conv and a stride-2 MaxPool."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w2")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 2, 1, 0], strides=[2, 1]),
        helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[3, 2], pads=[1, 0, 1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["d"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MaxPool", ["d"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    ]
    graph = helper.make_graph(nodes, "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 13, 11])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return models.with_output_shapes(model)


def _fuzzer_units(work: Path) -> list[tuple[Path, list[str]]]:
    """(source, defines) of everything the fuzz driver links: the runtime, every
    kernel of the registry, their support units, the generated registry, the driver."""
    from minibuild import codegen
    reg = registry_mod.load()
    manifest = testing.full_manifest(reg)
    codegen.render(reg, manifest, work / "gen")
    src = resources.path("kernels_src")
    units = [(src / r, []) for r in build_mod.RUNTIME_SOURCES]
    support = set()
    for u in build_mod.kernel_units(reg, manifest):
        support.update(u["requires"])
        units.append((src / u["source"], [f"-D{d}" for d in u["defines"]]))
    units += [(src / reg.support[s].source, []) for s in sorted(support)]
    units.append((work / "gen" / "registry.c", []))
    units.append((HERE / "fuzz" / "mrt_fuzz.c", []))
    return units


def _compile_and_link(cc: list[str], flags: list[str], link_flags: list[str], work: Path) -> Path:
    src = resources.path("kernels_src")
    includes = ["-I", str(src / "include"), "-I", str(src / "runtime"), "-I", str(src / "kernels"),
                "-I", str(work / "gen")]
    objs, procs = [], []
    for i, (path, defs) in enumerate(_fuzzer_units(work)):
        obj = work / f"u{i}.o"
        procs.append(subprocess.Popen([*cc, *flags, *includes, *defs, "-c", str(path), "-o", str(obj)],
                                      stderr=subprocess.PIPE, text=True))
        objs.append(str(obj))
        if len(procs) >= 4:
            p = procs.pop(0)
            assert p.wait() == 0, p.stderr.read()
    for p in procs:
        assert p.wait() == 0, p.stderr.read()
    exe = work / "mrt_fuzz"
    subprocess.run([*cc, *link_flags, *objs, "-o", str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def asan_fuzzer(tmp_path_factory):
    # Debian's clang with its sanitizer runtimes (clang + libclang-rt-14-dev, installed
    # by .ci/run): the kernels use clang vector builtins that gcc lacks.
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("Debian's clang (apt-get install clang libclang-rt-14-dev) builds the sanitizer fuzzer")
    flags = ["-std=c11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer"]
    return _compile_and_link([clang], flags, ["-fsanitize=address,undefined", "-lm"],
                             tmp_path_factory.mktemp("asan"))


@pytest.fixture(scope="module")
def armv7_fuzzer(tmp_path_factory):
    """The same driver for armv7 (32-bit size_t, as Android's armeabi-v7a), static musl,
    run under qemu-user: no sanitizer there, but an out-of-bounds access or a wrapped
    size still crashes it, and a failed create must still leave a message."""
    from minibuild.platforms import android
    qemu = shutil.which(android.VERIFY_TARGETS["qemu-armv7"].extra["qemu"])
    if qemu is None:
        pytest.skip("qemu-user-static is not installed (.ci/setup-android.sh installs it)")
    target = android.VERIFY_TARGETS["qemu-armv7"]
    cc = [*toolchain.ZIG, "cc", "-target", target.triple]
    exe = _compile_and_link(cc, ["-std=c11", "-O2", *target.arch_cflags],
                            ["-static", "-mcpu=generic+v7a", "-mfloat-abi=softfp"], tmp_path_factory.mktemp("armv7"))
    return qemu, exe


@pytest.mark.parametrize("seed,rng_seed", [("classifier", 1), ("classifier", 2), ("classifier", 3),
                                           ("windows", 4), ("windows", 5)])
def test_loader_survives_mutated_models_under_asan(asan_fuzzer, seed_models, seed, rng_seed):
    res = subprocess.run([str(asan_fuzzer), str(seed_models / f"{seed}.mrt"), "1500", str(rng_seed)],
                         capture_output=True, text=True, timeout=600,
                         env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:allocator_may_return_null=1", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert res.returncode == 0, res.stderr[-4000:]
    print(res.stdout)
    created = int(res.stdout.split(":")[1].split()[0])
    rejected = int(res.stdout.split(",")[1].split()[0])
    assert created + rejected == 1500 and rejected > 500  # most mutations must be caught by checks


@pytest.mark.parametrize("seed", ["classifier", "windows"])
def test_loader_survives_mutated_models_on_32_bit_armv7(armv7_fuzzer, seed_models, seed):
    qemu, exe = armv7_fuzzer
    res = subprocess.run([qemu, str(exe), str(seed_models / f"{seed}.mrt"), "600", "7"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    print(res.stdout)
    created = int(res.stdout.split(":")[1].split()[0])
    rejected = int(res.stdout.split(",")[1].split()[0])
    assert created + rejected == 600 and created > 0 and rejected > 200


def test_shipped_library_rejects_corrupt_files_with_messages(seed_models):
    import importlib
    import sys
    testing._session_lib()
    sys.path.insert(0, str(resources.path("packaging", "python")))
    minirt = importlib.import_module("minirt")
    good = (seed_models / "classifier.mrt").read_bytes()
    minirt.InferenceSession(good).close()

    def fix_crc(b: bytearray) -> bytes:
        b[12:16] = struct.pack("<I", zlib.crc32(bytes(b[96:])) & 0xFFFFFFFF)
        return bytes(b)

    cases = {
        "empty": b"",
        "bad magic": b"XXXX" + good[4:],
        "truncated": good[:-1],
        "flipped weight byte": good[:-10] + bytes([good[-10] ^ 0xFF]) + good[-9:],
        "future major version": fix_crc(bytearray(good[:4] + struct.pack("<H", 9) + good[6:])),
        "tensor count past the file": fix_crc(bytearray(good[:32] + struct.pack("<I", 0x7FFFFFFF) + good[36:])),
    }
    for what, data in cases.items():
        with pytest.raises(minirt.MinirtError) as e:
            minirt.InferenceSession(data)
        assert e.value.status == "INVALID_MODEL", (what, str(e.value))
        assert len(str(e.value)) > 20, what

"""Fuzz what parses untrusted bytes: the .mrt loader (and, for models that still load
after mutation, prepare and run), under AddressSanitizer + UBSan with Debian's clang:
a structure-aware mutation fuzzer (tests/fuzz/mrt_fuzz.c, also built for armv7 and
run under qemu) and coverage-guided libFuzzer (tests/fuzz/mrt_libfuzzer.c), both on
seed models that cover every kernel family, int8 ones (QDQ, QOperator, dynamic)
included (tests/fuzz/seeds.py). Also a quick
in-process check that the shipped library rejects corrupt files cleanly."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import models
from minibuild import build as build_mod, registry as registry_mod, resources, testing, toolchain
from minibuild.testing import convert_model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fuzz"))
import seeds as fuzz_seeds  # noqa: E402  (tests/fuzz/seeds.py)

# libFuzzer's budget in CI: the whole file stays under ~3 minutes on 2 cores. A longer
# run (to report on, or after a kernel change): MINIBUILD_LIBFUZZER_SECONDS=180.
LIBFUZZER_SECONDS = int(os.environ.get("MINIBUILD_LIBFUZZER_SECONDS", "45"))
SANITIZER_ENV = {
    # allocator_may_return_null + max_allocation_size_mb: a corrupt model asking for a
    # huge arena gets NULL (and must report OUT_OF_MEMORY) instead of libFuzzer's
    # malloc limit calling it a crash; anything else a sanitizer sees aborts.
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:max_allocation_size_mb=1024",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


@pytest.fixture(scope="module")
def seed_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    reg = registry_mod.load()
    m = models.small_classifier()
    data, _ = convert_model(m, {"image": np.zeros((1, 3, 32, 32), np.float32)}, registry=reg)
    (d / "classifier.mrt").write_bytes(data)
    data, _ = convert_model(_windows_model(), {"x": np.zeros((1, 4, 13, 11), np.float32)}, registry=reg)
    (d / "windows.mrt").write_bytes(data)
    _, skipped = fuzz_seeds.write_seeds(d, reg)
    for name, why in skipped.items():
        print(f"seed {name} skipped: {why}")
    return d


def _seed(seed_models: Path, name: str) -> Path:
    path = seed_models / f"{name}.mrt"
    if not path.exists():
        seed = next(s for s in fuzz_seeds.SEEDS if s.name == name)
        pytest.skip(f"seed {name}: ops not in the registry yet: {', '.join(fuzz_seeds.missing_ops(seed, registry_mod.load()))}")
    return path


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
    """(source, defines) of everything a fuzz driver links: the runtime, every
    kernel of the registry, their support units, the generated registry (the driver
    itself is added by the caller)."""
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
    return units


def _includes(work: Path) -> list[str]:
    src = resources.path("kernels_src")
    return ["-I", str(src / "include"), "-I", str(src / "runtime"), "-I", str(src / "kernels"),
            "-I", str(work / "gen"), "-I", str(HERE / "fuzz")]


def _compile_units(cc: list[str], flags: list[str], work: Path) -> list[str]:
    includes = _includes(work)
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
    return objs


def _link_driver(cc: list[str], flags: list[str], link_flags: list[str], objs: list[str], driver: str,
                 work: Path) -> Path:
    exe = work / Path(driver).stem
    res = subprocess.run([*cc, *flags, *_includes(work), str(HERE / "fuzz" / driver), *objs, *link_flags,
                          "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return exe


def _compile_and_link(cc: list[str], flags: list[str], link_flags: list[str], work: Path) -> Path:
    return _link_driver(cc, flags, link_flags, _compile_units(cc, flags, work), "mrt_fuzz.c", work)


ASAN_FLAGS = ["-std=c11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
              "-fno-omit-frame-pointer"]


@pytest.fixture(scope="module")
def asan_objects(tmp_path_factory):
    """The runtime and every kernel compiled once under ASan + UBSan with libFuzzer's
    coverage instrumentation (-fsanitize=fuzzer-no-link): the mutation driver links
    them as they are (the sanitizer runtime defines the coverage hooks as no-ops),
    libFuzzer links them and gets the edges it steers by."""
    # Debian's clang with its sanitizer runtimes (clang + libclang-rt-14-dev, installed
    # by .ci/run): the kernels use clang vector builtins that gcc lacks.
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("Debian's clang (apt-get install clang libclang-rt-14-dev) builds the sanitizer fuzzer")
    work = tmp_path_factory.mktemp("asan")
    return clang, work, _compile_units([clang], [*ASAN_FLAGS, "-fsanitize=fuzzer-no-link"], work)


@pytest.fixture(scope="module")
def asan_fuzzer(asan_objects):
    clang, work, objs = asan_objects
    return _link_driver([clang], ASAN_FLAGS, ["-fsanitize=address,undefined", "-lm"], objs, "mrt_fuzz.c", work)


@pytest.fixture(scope="module")
def libfuzzer(asan_objects):
    clang, work, objs = asan_objects
    # libFuzzer's runtime is libclang_rt.fuzzer-<arch>.a, in libclang-rt-14-dev.
    probe = work / "probe.c"
    probe.write_text("#include <stdint.h>\n#include <stddef.h>\n"
                     "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
    res = subprocess.run([clang, "-fsanitize=fuzzer,address", str(probe), "-o", str(work / "probe")],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"clang cannot link libFuzzer (apt-get install libclang-rt-14-dev): {res.stderr.strip()[-300:]}")
    return _link_driver([clang], [*ASAN_FLAGS, "-fsanitize=fuzzer"], ["-fsanitize=fuzzer,address,undefined", "-lm"],
                        objs, "mrt_libfuzzer.c", work)


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
                                           ("windows", 4), ("windows", 5), ("transformer", 6), ("vision", 7),
                                           ("typed", 8), ("typed_logic", 9), ("int8_pools", 10),
                                           ("int8_qop_pools", 11), ("int8_dynamic", 12)])
def test_loader_survives_mutated_models_under_asan(asan_fuzzer, seed_models, seed, rng_seed):
    res = subprocess.run([str(asan_fuzzer), str(_seed(seed_models, seed)), "1500", str(rng_seed)],
                         capture_output=True, text=True, timeout=600, env=SANITIZER_ENV)
    assert res.returncode == 0, res.stderr[-4000:]
    print(res.stdout)
    created = int(res.stdout.split(":")[1].split()[0])
    rejected = int(res.stdout.split(",")[1].split()[0])
    assert created + rejected == 1500 and rejected > 500  # most mutations must be caught by checks


@pytest.mark.parametrize("seed", ["classifier", "windows", "transformer", "vision", "typed", "typed_logic", "int8_pools",
                                  "int8_qop_pools", "int8_dynamic"])
def test_loader_survives_mutated_models_on_32_bit_armv7(armv7_fuzzer, seed_models, seed):
    qemu, exe = armv7_fuzzer
    res = subprocess.run([qemu, str(exe), str(_seed(seed_models, seed)), "600", "7"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    print(res.stdout)
    created = int(res.stdout.split(":")[1].split()[0])
    rejected = int(res.stdout.split(",")[1].split()[0])
    assert created + rejected == 600 and created > 0 and rejected > 200


def test_seeds_cover_the_new_kernel_families(seed_models):
    """The transformer and vision seeds always convert (their ops are long in the
    registry), and each seed holds the ops it is there for, after the build's
    rewrites (the vision seed's Sigmoid * x must arrive as ai.minibuild.SiLU)."""
    reg = registry_mod.load()
    for seed in fuzz_seeds.SEEDS:
        path = seed_models / f"{seed.name}.mrt"
        if fuzz_seeds.missing_ops(seed, reg):
            assert not path.exists()
            continue
        ops = set(_mrt_ops(path.read_bytes()))
        assert ops == seed.converted_ops(), (seed.name, sorted(ops ^ seed.converted_ops()))
    assert (seed_models / "transformer.mrt").exists() and (seed_models / "vision.mrt").exists()
    for name in ("int8_qdq", "int8_qoperator", "int8_pools", "int8_qop_pools", "int8_dynamic"):  # int8 prepare paths
        assert (seed_models / f"{name}.mrt").exists(), name


def test_int8_seeds_match_onnxruntime():
    """The int8 seeds start the fuzzer from valid quantised graphs: each runs as
    onnxruntime does, bit for bit (a seed that drifted would fuzz the error paths only)."""
    ort = pytest.importorskip("onnxruntime")
    for seed in (s for s in fuzz_seeds.SEEDS if s.name.startswith("int8_")):
        model, feeds, constant = seed.build()
        data, _ = convert_model(model, feeds, constant_inputs=constant)
        assert set(_mrt_ops(data)) == seed.converted_ops(), seed.name
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        got = testing.run_with_minirt(model, feeds, constant_inputs=constant)
        for r, g in zip(ref, got):
            np.testing.assert_array_equal(g, r, err_msg=seed.name)


def _mrt_ops(data: bytes) -> list[str]:
    """Node ops of a .mrt (docs/model_format.md), domain-qualified unless ai.onnx."""
    n_nodes, = struct.unpack_from("<I", data, 36)
    nodes_off, = struct.unpack_from("<I", data, 60)
    strings_off, = struct.unpack_from("<I", data, 72)

    def string(off: int) -> str:
        start = strings_off + off
        return data[start:data.index(b"\0", start)].decode()
    ops = []
    for i in range(n_nodes):
        op, domain = struct.unpack_from("<II", data, nodes_off + 48 * i)
        d = string(domain)
        ops.append(f"{d}.{string(op)}" if d else string(op))
    return ops


def test_libfuzzer_finds_no_crash_in_bounded_run(libfuzzer, seed_models, tmp_path, record_property):
    """Coverage-guided: libFuzzer grows a corpus from every seed for a fixed time.
    Any sanitizer report, abort (a contract broken in fuzz_common.h), leak, timeout
    or out-of-memory leaves an artifact and a non-zero exit."""
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    max_len = max(p.stat().st_size for p in seed_models.glob("*.mrt")) + 512
    cmd = [str(libfuzzer), f"-max_total_time={LIBFUZZER_SECONDS}", "-rss_limit_mb=2048", "-timeout=10",
           "-print_final_stats=1", f"-max_len={max_len}", "-seed=1", f"-artifact_prefix={artifacts}/",
           str(corpus), str(seed_models)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=LIBFUZZER_SECONDS + 120, env=SANITIZER_ENV)
    found = sorted(p.name for p in artifacts.iterdir())
    assert res.returncode == 0 and not found, (res.returncode, found, res.stderr[-6000:])
    stats = libfuzzer_stats(res.stderr)
    for k, v in stats.items():
        record_property(f"libfuzzer_{k}", v)
    print(f"libFuzzer: {stats['executions']} executions in {LIBFUZZER_SECONDS}s, cov {stats['cov']}, "
          f"ft {stats['ft']}, corpus {stats['corpus']}, {stats['exec_per_sec']}/s, peak rss {stats['peak_rss_mb']} MB")
    assert stats["executions"] > 1000


def libfuzzer_stats(log: str) -> dict[str, int]:
    """Executions (-print_final_stats=1) and the last reported coverage of a run."""
    def stat(name):
        m = re.search(rf"stat::{name}:\s+(\d+)", log)
        return int(m.group(1)) if m else -1
    progress = [line for line in log.splitlines() if " cov: " in line]
    last = progress[-1] if progress else ""

    def field(name):
        m = re.search(rf"\b{name}: (\d+)", last)
        return int(m.group(1)) if m else -1
    return {"executions": stat("number_of_executed_units"), "exec_per_sec": stat("average_exec_per_sec"),
            "new_units": stat("new_units_added"), "peak_rss_mb": stat("peak_rss_mb"),
            "cov": field("cov"), "ft": field("ft"), "corpus": field("corp")}


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


def test_loader_refuses_a_memory_plan_where_an_output_partly_overlaps_its_input():
    """Copying kernels (Transpose, Concat, Gather, Expand...) trust the plan: the loader
    checks once that a node's output and its inputs alias exactly or lie apart."""
    import importlib
    import sys
    from onnx import TensorProto, helper
    from minibuild import convert
    testing._session_lib()
    sys.path.insert(0, str(resources.path("packaging", "python")))
    minirt = importlib.import_module("minirt")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
                           helper.make_node("Sigmoid", ["b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])])
    data, _ = convert_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), {"x": np.zeros((16, 16), np.float32)})
    minirt.InferenceSession(data).close()
    h = convert.HEADER.unpack_from(data)
    n_tensors, tensors_at, strings_at = h[7], h[13], h[17]
    body = bytearray(data)
    rec = {}   # tensor name -> (record position, kind, arena offset, nbytes)
    for i in range(n_tensors):
        at = tensors_at + i * convert.TENSOR.size
        f = convert.TENSOR.unpack_from(body, at)
        name = bytes(body[strings_at + f[0]:]).split(b"\0", 1)[0].decode()
        rec[name] = (at, f[3], f[10], f[11])
    (a_at, a_kind, a_off, a_n), (b_at, b_kind, b_off, b_n) = rec["a"], rec["b"]
    assert a_kind == b_kind == 0 and a_n == b_n == 16 * 16 * 4     # both in the arena
    assert a_off + a_n <= b_off or b_off + b_n <= a_off            # the planner keeps them apart
    struct.pack_into("<Q", body, b_at + 64, a_off + 64)            # b now starts 64 bytes into a
    body[12:16] = struct.pack("<I", zlib.crc32(bytes(body[96:])) & 0xFFFFFFFF)
    with pytest.raises(minirt.MinirtError) as e:
        minirt.InferenceSession(bytes(body))
    assert e.value.status == "INVALID_MODEL" and "output 'b' partly overlaps input 'a'" in str(e.value), str(e.value)

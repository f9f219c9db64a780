"""Mach-O attribution (iOS static archives are archives of Mach-O objects): objects
compiled by `zig cc -target aarch64-ios -c`, archived with `zig ar`, attributed per
member; the parts add up to the archive's size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minibuild import build, toolchain
from minibuild.report import attribution, binfmt

ZIG = [sys.executable, "-m", "ziglang"]

SOURCES = {
    "kernels/Relu__float32.c": "#include <stddef.h>\n"
    "const char *relu_msg(void) { return \"relu: shapes differ\"; }\n"
    "void mrt_relu_f32(size_t n, const float *x, float *y) { for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; }\n",
    "runtime/session.c": "#include <stddef.h>\n"
    "static int counter;\n"
    "static const double table[4] = {1.5, 2.5, 3.5, 4.5};\n"
    "double mrt_session_run(int i) { counter++; return table[i & 3] * counter; }\n",
}
ROLES = {"obj/kernels/Relu__float32.o": ("kernel", "ai.onnx.Relu", "float32"),
         "obj/runtime/session.o": ("runtime", "session")}


@pytest.fixture(scope="module")
def ios_archive(tmp_path_factory):
    d = tmp_path_factory.mktemp("ios")
    objs = []
    for rel, text in SOURCES.items():
        src = d / "src" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        obj = d / "obj" / (rel[:-2] + ".o")
        obj.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*ZIG, "cc", "-target", "aarch64-ios", "-Os", "-c", str(src), "-o", str(obj)],
                       check=True, env=build.zig_env())
        objs.append(obj)
    lib = d / "lib" / "libminirt.a"
    lib.parent.mkdir()
    subprocess.run([*ZIG, "ar", "rcs", "--format=darwin", str(lib), *map(str, objs)], check=True, env=build.zig_env())
    return d, lib


def test_macho_object_reader(ios_archive):
    d, _ = ios_archive
    img = binfmt.read(d / "obj" / "kernels" / "Relu__float32.o")
    assert img.format == "macho" and img.relocatable
    assert img.section("__TEXT,__text").kind == "code"
    names = {s.name for s in img.symbols if s.defined}
    assert "_mrt_relu_f32" in names
    info = binfmt.object_info(d / "obj" / "kernels" / "Relu__float32.o")
    assert b"relu: shapes differ\0" in info.strings
    assert info.defined["_mrt_relu_f32"][0][1] > 0  # sized to the next symbol


def test_ios_archive_attribution_adds_up(ios_archive):
    d, lib = ios_archive
    target = toolchain.Target("ios", "arm64", "aarch64-ios", library="libminirt.a")
    tb = build.TargetBuild(target, d, lib, None, ROLES)
    att = attribution.attribute_target(tb)
    L = att.ledger
    assert att.method == "archive-members" and att.format == "ar/macho"
    total = sum(c.bytes for c in L.components.values()) + sum(L.overhead.values()) + sum(L.unattributed.values())
    assert total == att.file_size == lib.stat().st_size
    assert not L.unattributed and not L.notes
    relu = L.components["obj/kernels/Relu__float32.o"]
    assert relu.kind == "kernel" and relu.op == "ai.onnx.Relu"
    assert relu.sections["__TEXT,__text"] > 0 and relu.sections.get("__TEXT,__cstring", 0) >= len("relu: shapes differ")
    session = L.components["obj/runtime/session.o"]
    assert session.kind == "runtime" and session.bytes > 0
    assert relu.member_bytes > relu.bytes
    assert "archive symbol index" in L.overhead and "archive member headers" in L.overhead


def test_macho_dylib_symbols(tmp_path):
    """A linked Mach-O image (macOS dylib, as the Python wheels ship): attributed by symbols."""
    src = tmp_path / "a.c"
    src.write_text(SOURCES["kernels/Relu__float32.c"])
    obj = tmp_path / "obj" / "kernels" / "Relu__float32.o"
    obj.parent.mkdir(parents=True)
    env = build.zig_env()
    subprocess.run([*ZIG, "cc", "-target", "aarch64-macos", "-Os", "-c", str(src), "-o", str(obj)], check=True, env=env)
    lib = tmp_path / "libx.dylib"
    subprocess.run([*ZIG, "cc", "-target", "aarch64-macos", "-shared", "-o", str(lib), str(obj)], check=True, env=env)
    target = toolchain.Target("python", "macos-arm64", "aarch64-macos", library="libx.dylib")
    tb = build.TargetBuild(target, tmp_path, lib, lib, {"obj/kernels/Relu__float32.o": ROLES["obj/kernels/Relu__float32.o"]})
    att = attribution.attribute_target(tb)
    L = att.ledger
    total = sum(c.bytes for c in L.components.values()) + sum(L.overhead.values()) + sum(L.unattributed.values())
    assert att.format == "macho" and att.method == "symbols"
    assert total == att.file_size
    assert L.components["obj/kernels/Relu__float32.o"].sections["__TEXT,__text"] > 0

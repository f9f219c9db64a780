"""Android: libminirt.so for arm64-v8a, armeabi-v7a, x86 and x86_64, packaged as an AAR
with the Java API (ai.minibuild.minirt) and its JNI glue, plus a prefab package for
CMake (by default in an AAR of its own: see PREFAB_LAYOUTS).

No NDK. Zig compiles the objects for the Android triples but carries no Android
libc, so it will not link an Android .so. Instead each ABI gets stub `libc.so` and
`libm.so` (packaging/android/stubs: the symbols bionic exports, bodies never run,
SONAME set), zig's compiler_rt as an object (the `__aeabi_*` / `__udivdi3` helpers
bionic does not promise), and lld links the lot. The result names only
`libc.so`/`libm.so` in DT_NEEDED, exactly as an NDK build does.

The JDK's jni.h includes <stdio.h>, and the runtime core includes <stdio.h> and
<stdlib.h>; zig has no bionic headers, so Android objects see zig's bundled musl
headers. Only function declarations are used (malloc, fopen, vsnprintf, ...),
whose C ABI bionic shares; no libc structure crosses the boundary.

Also here: VERIFY_TARGETS, builds of the same sources that can run on this machine
(static musl executables for qemu-user, and a host .so with the JNI glue for the
host JVM) so the tests check the kernels and the Java API for real.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from .. import actions, archive, buildinfo, __version__, resources, toolchain
from ..errors import BuildError
from ..fsutil import write_if_changed
from ..toolchain import ZIG, Target
from . import check_package_version

API_LEVEL = 21
JAVA_PACKAGE = "ai.minibuild.minirt"     # fixed: the JNI symbol names are derived from it
JNI_PREFIX = "Java_" + JAVA_PACKAGE.replace(".", "_") + "_"
JNI_EXPORTS = ("JNI_OnLoad",)
STUB_LIBS = ("c", "m")                   # bionic libraries the .so may name in DT_NEEDED
PAGE_SIZE = 16384                        # 16 KB pages (Android 15+ devices); works on 4 KB too


def _zig_libc_include() -> Path:
    import ziglang
    return Path(ziglang.__file__).resolve().parent / "lib" / "libc" / "include"


def _musl_headers(arch: str) -> tuple:
    inc = _zig_libc_include()
    return ("-isystem", str(inc / f"{arch}-linux-musl"), "-isystem", str(inc / "generic-musl"))


# armeabi-v7a is ARMv7-A, Thumb-2, VFPv3 + NEON, soft-float calling convention
# ("softfp": FP instructions, arguments in core registers). Two zig quirks:
# `-mthumb` is ignored (thumb_mode is a CPU feature), and zig hands clang an
# explicit `-vfp2` that switches NEON back off unless vfp2 is re-enabled.
# `-mimplicit-float` undoes the `-mno-implicit-float` zig adds for soft-float ABIs,
# which would otherwise keep NEON out of memcpy and vectorised loops.
ARMV7_CFLAGS = ("-mcpu=generic+v7a+neon+thumb_mode", "-mfloat-abi=softfp", "-mimplicit-float",
                "-Xclang", "-target-feature", "-Xclang", "+vfp2")

# ABI -> (zig triple without the API level, zig's arch name (musl headers), ISA flags)
_ABIS = {
    # ARMv8-A + NEON: zig's baseline for aarch64.
    "arm64-v8a": ("aarch64-linux-android", "aarch64", ()),
    "armeabi-v7a": ("arm-linux-androideabi", "arm", ARMV7_CFLAGS),
    # i686 + SSSE3 as the Android x86 ABI says.
    "x86": ("x86-linux-android", "x86", ("-mcpu=i686+ssse3",)),
    # x86-64 + SSE4.2 + POPCNT, the Android x86_64 ABI.
    "x86_64": ("x86_64-linux-android", "x86_64", ("-mcpu=x86_64_v2",)),
}

# zig keeps frame pointers at -O2 on 32-bit ARM and x86: a register the micro-kernels
# want, and bytes. (With the size-first flags' lack of unwind tables, a native crash
# backtrace stops inside minirt; libminirt.so.debug still names the top frame.)
_COMMON = ("-fomit-frame-pointer",)

TARGETS = {
    abi: Target("android", abi, f"{triple}.{API_LEVEL}", arch_cflags=(*isa, *_COMMON, *_musl_headers(arch)),
                link="android-lld", extra={"arch": arch, "isa": isa})
    for abi, (triple, arch, isa) in _ABIS.items()
}
DEFAULT_ABIS = ["arm64-v8a", "armeabi-v7a", "x86", "x86_64"]

# Builds that run here: the kernels as static Linux executables (musl) for qemu-user,
# with the same ISA flags as the Android ABI; and the JNI glue for the host JVM.
VERIFY_TARGETS = {
    "qemu-aarch64": Target("android", "qemu-aarch64", "aarch64-linux-musl", link="runner",
                           extra={"qemu": "qemu-aarch64-static"}),
    "qemu-armv7": Target("android", "qemu-armv7", "arm-linux-musleabi", arch_cflags=ARMV7_CFLAGS, link="runner",
                         extra={"qemu": "qemu-arm-static"}),
    "host-jni": Target("android", "host-jni", f"{toolchain.host_abi()}-linux-gnu.2.17", link="host-jni"),
}


# --------------------------------------------------------------------------- JDK


@dataclass(frozen=True)
class Jdk:
    home: Path

    @property
    def include(self) -> list[Path]:
        return [self.home / "include", self.home / "include" / "linux"]

    def tool(self, name: str) -> str:
        p = self.home / "bin" / name
        return str(p) if p.is_file() else (shutil.which(name) or name)


def find_jdk() -> Jdk:
    """A JDK with jni.h and javac: JAVA_HOME, else the one `javac` on PATH belongs to,
    else the newest under /usr/lib/jvm."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    javac = shutil.which("javac")
    if javac:
        candidates.append(Path(os.path.realpath(javac)).parent.parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)]
    for home in candidates:
        if (home / "include" / "jni.h").is_file() and (home / "include" / "linux" / "jni_md.h").is_file() \
                and (home / "bin" / "javac").is_file():
            return Jdk(home.resolve())
    raise BuildError("the Android build needs a JDK (jni.h for the JNI glue, javac for the Java API) and found "
                     "none (looked at JAVA_HOME, javac on PATH, /usr/lib/jvm/*). Install one, e.g. "
                     "`apt-get install openjdk-17-jdk-headless`, or set JAVA_HOME.")


# --------------------------------------------------------------------------- build


def _android_dir(*parts: str) -> Path:
    return resources.path("packaging", "android", *parts)


def extra_objects(target: Target) -> list[dict]:
    """Objects beyond the runtime and kernels (build.plan_target calls this): the JNI
    glue for Android and host-JVM builds, the test runner for qemu builds."""
    if target.link == "runner":
        return [{"source": str(_android_dir("tools", "mrt_run.c")), "target": "obj/tools/mrt_run.o", "speed": False,
                 "defines": [], "label": "mrt_run.c", "role": ["tool", "mrt_run"], "cflags": []}]
    jdk = find_jdk()
    # Host builds have glibc headers from zig; Android ones already see musl's (arch_cflags).
    cflags = [f for inc in jdk.include for f in ("-isystem", str(inc))]
    if target.platform == "android" and target.abi == "x86":
        # Before API 24 the stack is only 4-byte aligned on entry from Java code. The JNI
        # entry points realign it; everything they call then runs aligned, so the rest of
        # the library does without the NDK's blanket -mstackrealign (and its bytes).
        cflags.append("-mstackrealign")
    return [{"source": str(_android_dir("jni", "minirt_jni.c")), "target": "obj/jni/minirt_jni.o", "speed": False,
             "defines": [], "label": "minirt_jni.c", "role": ["binding", "jni"], "cflags": cflags}]


def version_script() -> str:
    """The C API, the JNI entry points, nothing else."""
    names = sorted(toolchain.C_API) + [f"{JNI_PREFIX}*", *JNI_EXPORTS]
    return "{\n  global:\n" + "".join(f"    {s};\n" for s in names) + "  local:\n    *;\n};\n"


def _compiler_rt_steps(target: Target, tdir: Path) -> list[dict]:
    """zig's compiler_rt for the target (the `__aeabi_*` / `__udivdi3` helpers bionic
    does not promise; hidden, so they stay inside libminirt.so), with its copies of
    libc/libm functions turned back into references to bionic (tools/rt_unbind.py).
    ARM mode, not Thumb: its inline assembly is written for ARM; interworking calls
    make that invisible."""
    import ziglang
    src = Path(ziglang.__file__).resolve().parent / "lib" / "compiler_rt.zig"
    cpu = ["-mcpu=generic+v7a"] if target.extra["arch"] == "arm" else \
        [f for f in target.extra["isa"] if f.startswith("-mcpu=")]
    build = [*ZIG, "build-obj", "-target", target.triple, *cpu, "-OReleaseSmall", "-fPIC", "-fstrip",
             "-ffunction-sections", "-fdata-sections", "--name", "compiler_rt", str(src), "-femit-bin=$TARGET"]
    tool = _android_dir("tools", "rt_unbind.py")
    stubs = [str(_android_dir("stubs", f"lib{lib}.c")) for lib in STUB_LIBS]
    raw = str(tdir / "rt" / "compiler_rt.zig.o")
    return [{"output": "rt/compiler_rt.zig.o", "command": build, "verb": "RT"},
            {"output": "rt/compiler_rt.o", "verb": "RT", "inputs": [str(tool), *stubs, raw],
             "command": [sys.executable, str(tool), raw, "$TARGET", *stubs]}]


def _stub_steps(target: Target, tdir: Path) -> list[dict]:
    steps = []
    for lib in STUB_LIBS:
        src = _android_dir("stubs", f"lib{lib}.c")
        obj = tdir / "stubs" / f"lib{lib}.o"
        steps.append({"output": f"stubs/lib{lib}.o", "verb": "STUB", "inputs": [str(src)],
                      "command": [*ZIG, "cc", "-target", target.triple, *target.extra["isa"], "-fPIC", "-fno-builtin",
                                  "-w", "-c", "-o", "$TARGET", str(src)]})
        steps.append({"output": f"stubs/lib{lib}.so", "verb": "STUB", "inputs": [str(obj)],
                      "command": [*ZIG, "ld.lld", "-shared", "--soname", f"lib{lib}.so", "--hash-style=both",
                                  "-o", "$TARGET", str(obj)]})
    return steps


def link_steps(target: Target, tdir: Path) -> list[dict]:
    if target.link == "runner":
        # zig links musl and compiler_rt itself; ARM mode for its compiler_rt (see above).
        cpu = ["-mcpu=generic+v7a", "-mfloat-abi=softfp"] if "arm-" in target.triple else []
        cmd = [*ZIG, "cc", "-target", target.triple, *cpu, "-static", "-s", "-Wl,--gc-sections", "-o", "$TARGET",
               "$SOURCES"]
        return [{"output": "bin/mrt_run", "role": "deliverable", "command": cmd, "verb": "LINK"}]
    vs = tdir / "exports.map"
    write_if_changed(vs, version_script())
    if target.link == "host-jni":
        # -lpthread after --as-needed: glibc 2.17 keeps the thread pool's pthreads there.
        cmd = [*ZIG, "cc", "-target", target.triple, "-shared", "-o", "$TARGET", "$SOURCES", "-nostdlib", "-lc",
               f"-Wl,--version-script={vs}", "-Wl,--gc-sections", "-Wl,--as-needed", "-lpthread", "-Wl,-soname,libminirt.so",
               "-Wl,-z,noexecstack", "-s"]
        return [{"output": "lib/libminirt.so", "role": "deliverable", "command": cmd, "verb": "LINK", "inputs": [str(vs)]}]
    rt = _compiler_rt_steps(target, tdir)
    rt_obj = str(tdir / rt[-1]["output"])
    stubs = _stub_steps(target, tdir)
    stub_libs = [str(tdir / s["output"]) for s in stubs if s["output"].endswith(".so")]
    # compiler_rt (an object, unbound from libc names: see _compiler_rt_steps) serves only
    # what bionic lacks; --gc-sections drops the rest of it.
    cmd = [*ZIG, "ld.lld", "-shared", "--soname", target.library, "-o", "$TARGET", "$SOURCES",
           "--as-needed", *stub_libs, rt_obj,
           "-z", f"max-page-size={PAGE_SIZE}", "--build-id=sha1", "--gc-sections", "--icf=safe",
           f"--version-script={vs}", "-z", "noexecstack", "-z", "now", "-z", "relro",
           # SysV hash only: the one every API level reads (GNU hash needs API 23), and
           # with ~30 exports lookup speed is moot. -Bsymbolic-functions binds the library's
           # calls to its own exported C API directly, not through the PLT.
           "--hash-style=sysv", "-Bsymbolic-functions",
           # Every symbol must resolve now (against the stubs): a missing one would
           # otherwise surface as a dlopen failure on a device.
           "-z", "defs", "--no-undefined-version", "--warn-shared-textrel", "--fatal-warnings"]
    inputs = [str(vs), rt_obj, *stub_libs]
    # The roles tell build.plan_target which output is which; the helper steps run
    # first anyway (`inputs`). lld writes the deliverable's map itself (-Map), beside
    # the library, for the size report; the map does not change the library's bytes.
    return [{"output": f"lib/{target.library}.debug", "role": "unstripped", "command": cmd, "verb": "LINK",
             "inputs": inputs},
            *({**s, "role": "helper"} for s in (*rt, *stubs)),
            {"output": f"lib/{target.library}", "role": "deliverable", "command": cmd + ["--strip-all", "-Map=$MAP"],
             "verb": "LINK", "inputs": inputs, "map": {"output": f"lib/{target.library}.map", "via": "argument"}}]


# --------------------------------------------------------------------------- Java

JAR_MANIFEST = b"Manifest-Version: 1.0\r\nCreated-By: minibuild\r\n\r\n"


def compile_java(out_dir: Path, jdk: Jdk | None = None) -> bytes:
    """classes.jar of the Java API (javac --release 8), rebuilt only when a source
    or the compiler changes. The jar is written entry by entry with fixed
    timestamps, so the same sources give the same bytes."""
    jdk = jdk or find_jdk()
    javac = jdk.tool("javac")
    sources = sorted(_android_dir("java").rglob("*.java"))
    root = _android_dir("java")
    flags = ["--release", "8", "-encoding", "UTF-8", "-g:source,lines", "-Xlint:all,-options", "-Werror"]
    ver = subprocess.run([javac, "-version"], capture_output=True, text=True)
    key = hashlib.sha256(json.dumps([(ver.stdout + ver.stderr).strip(), flags]).encode())
    for src in sources:
        key.update(str(src.relative_to(root)).encode() + b"\0" + src.read_bytes())
    jar, stamp = out_dir / "classes.jar", out_dir / "classes.jar.sha256"
    if jar.is_file() and stamp.is_file() and stamp.read_text() == key.hexdigest():
        return jar.read_bytes()
    data = actions.cached("javac", "classes.jar", [key.hexdigest()],
                          lambda: {"classes.jar": _javac(javac, flags, sources)})["classes.jar"]
    write_if_changed(jar, data)
    write_if_changed(stamp, key.hexdigest())
    return data


def _javac(javac: str, flags: list[str], sources: list[Path]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="minirt-javac-") as tmp:
        proc = subprocess.run([javac, *flags, "-d", tmp, *map(str, sources)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"javac failed on the Java API (packaging/android/java):\n{proc.stdout}{proc.stderr}")
        entries = {"META-INF/MANIFEST.MF": JAR_MANIFEST}
        for f in sorted(Path(tmp).rglob("*.class")):
            entries[f.relative_to(tmp).as_posix()] = f.read_bytes()
    return archive.zip_bytes(entries, directories=False, sorted_entries=False)


# --------------------------------------------------------------------------- AAR

def deflated_size(data: bytes) -> int:
    """What `data` takes as a deflate -9 zip entry (zipfile's raw deflate stream)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return len(c.compress(data) + c.flush())


_VERSION_LIKE = re.compile(r"^\d[0-9A-Za-z.+-]*$")
_JAVA_PACKAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_names(name: str, package: str, version: str) -> str:
    """Validates the AAR's names; returns the version prefab can hold (digits only)."""
    if not _NAME.match(name):
        raise ValueError(f"--android-name {name!r}: use letters, digits, '.', '_' or '-' (e.g. minirt)")
    if not _JAVA_PACKAGE.match(package):
        raise ValueError(f"--android-package {package!r}: expected a Java package name such as com.example.minirt")
    return check_package_version(version)


def manifest_xml(package: str) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            '<manifest xmlns:android="http://schemas.android.com/apk/res/android"\n'
            f'    package="{package}">\n'
            f'    <uses-sdk android:minSdkVersion="{API_LEVEL}" />\n'
            '</manifest>\n')


PROGUARD = f"""\
# minirt: the JNI glue in libminirt.so finds these classes and members by name.
-keepclasseswithmembernames,includedescriptorclasses class {JAVA_PACKAGE}.MiniRtSession {{
    native <methods>;
}}
-keep class {JAVA_PACKAGE}.MiniRtException {{
    <init>(int, java.lang.String, java.lang.String);
}}
"""

AAR_METADATA = ("aarFormatVersion=1.0\naarMetadataVersion=1.0\nminCompileSdk=1\n"
                "minAndroidGradlePluginVersion=1.0.0\n")


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


# Where the prefab package (C/C++ consumers) goes. jni/ and prefab/ each need their own
# copy of every .so, and AGP packages both into an app that links the prefab target, which
# then fails with "2 files found with path 'lib/<abi>/libminirt.so'" unless the app adds a
# pickFirst. So by default the prefab package ships as a second AAR, NAME-prefab-VERSION.aar:
# Java/Kotlin apps take the first, C/C++ apps the second, and neither carries bytes it
# does not use.
PREFAB_LAYOUTS = ("separate", "bundled", "none")


def _aar_common(package: str, classes_jar: bytes, build_info: bytes) -> dict[str, bytes]:
    e = {
        "AndroidManifest.xml": manifest_xml(package).encode(),
        "classes.jar": classes_jar,
        "R.txt": b"",
        "META-INF/com/android/build/gradle/aar-metadata.properties": AAR_METADATA.encode(),
    }
    if build_info:
        # Runtime version and manifest hash: ties the AAR to the model set it serves.
        e["META-INF/minirt/build_info.json"] = build_info
    return e


def _prefab_entries(libraries: dict[str, bytes], header: bytes, name: str, prefab_version: str) -> dict[str, bytes]:
    # Prefab (AGP `buildFeatures { prefab true }`): find_package(<name>) -> <name>::minirt.
    e = {"prefab/prefab.json": _json({"schema_version": 2, "name": name, "version": prefab_version,
                                      "dependencies": []}),
         "prefab/modules/minirt/module.json": _json({"export_libraries": [], "android": {}}),
         "prefab/modules/minirt/include/minirt.h": header}
    for abi, so in sorted(libraries.items()):
        d = f"prefab/modules/minirt/libs/android.{abi}"
        # "ndk": the NDK major version the library is compatible with; it is built
        # against API-21 bionic (no NDK), which every NDK since r21 targets.
        e[f"{d}/abi.json"] = _json({"abi": abi, "api": API_LEVEL, "ndk": 21, "stl": "none", "static": False})
        e[f"{d}/libminirt.so"] = so
    return e


def aar_entries(libraries: dict[str, bytes], classes_jar: bytes, header: bytes, name: str, package: str,
                prefab_version: str, prefab: bool = False, build_info: bytes = b"") -> dict[str, bytes]:
    """Everything inside the main AAR. `libraries`: ABI -> stripped libminirt.so, in
    jni/ for Java/Kotlin apps (AGP packages it into the APK); `prefab=True` also puts
    the prefab package inside (the "bundled" layout)."""
    e = _aar_common(package, classes_jar, build_info)
    e["proguard.txt"] = PROGUARD.encode()
    for abi, so in sorted(libraries.items()):
        e[f"jni/{abi}/libminirt.so"] = so
    if prefab:
        e.update(_prefab_entries(libraries, header, name, prefab_version))
    return e


def prefab_aar_entries(libraries: dict[str, bytes], header: bytes, name: str, package: str, prefab_version: str,
                       build_info: bytes = b"") -> dict[str, bytes]:
    """The prefab AAR of the "separate" layout: headers and libraries for CMake/ndk-build,
    no Java. Its manifest package is PACKAGE.prefab, as two libraries in one app may not
    share a namespace."""
    jar = archive.zip_bytes({"META-INF/MANIFEST.MF": JAR_MANIFEST}, directories=False)
    e = _aar_common(f"{package}.prefab", jar, build_info)
    e.update(_prefab_entries(libraries, header, name, prefab_version))
    return e


def check_options(opts) -> str:
    """The AAR's names and prefab layout, checked before anything compiles; returns the
    version prefab can hold."""
    layout = getattr(opts, "android_prefab", "separate")
    if layout not in PREFAB_LAYOUTS:
        raise ValueError(f"--android-prefab {layout!r}: expected one of {', '.join(PREFAB_LAYOUTS)}")
    return _check_names(getattr(opts, "android_name", "minirt"), getattr(opts, "android_package", JAVA_PACKAGE),
                        getattr(opts, "package_version", __version__))


def package(ctx) -> list[Path]:
    """OUT/dist/<name>-<version>.aar (and <name>-prefab-<version>.aar in the "separate"
    prefab layout), the converted models beside it, and OUT/dist/android-sizes.json
    (per-ABI .so raw and deflated bytes, each AAR's bytes)."""
    opts = ctx.opts
    name = getattr(opts, "android_name", "minirt")
    package_name = getattr(opts, "android_package", JAVA_PACKAGE)
    version = getattr(opts, "package_version", __version__)
    layout = getattr(opts, "android_prefab", "separate")
    prefab_version = check_options(opts)
    dist = ctx.out / "dist"
    builds = [tb for tb in ctx.builds if tb.target.abi in TARGETS]
    libraries = {tb.target.abi: Path(tb.library).read_bytes() for tb in builds}
    classes = compile_java(ctx.out / "build" / "android-java")
    header = resources.path("kernels_src", "include", "minirt.h").read_bytes()
    info = buildinfo.to_json(buildinfo.build_info(ctx, platform="android", abis=sorted(libraries)))
    aars = {"aar": (f"{name}-{version}.aar",
                    aar_entries(libraries, classes, header, name, package_name, prefab_version,
                                prefab=layout == "bundled", build_info=info))}
    if layout == "separate":
        aars["prefab_aar"] = (f"{name}-prefab-{version}.aar",
                              prefab_aar_entries(libraries, header, name, package_name, prefab_version,
                                                 build_info=info))
    # AARs of this name from another version or prefab layout would be picked up by `dist/*.aar`.
    current = {fname for fname, _ in aars.values()}
    for old in dist.glob(f"{name}-*.aar"):
        rest = old.name[len(name) + 1:-len(".aar")]
        rest = rest[len("prefab-"):] if rest.startswith("prefab-") else rest
        if old.name not in current and _VERSION_LIKE.match(rest):
            old.unlink()
    files, sizes = [], {"prefab_layout": layout}
    for key, (fname, entries) in aars.items():
        data = actions.archive(fname, archive.zip_bytes, entries, directories=False)
        files.append(write_if_changed(dist / fname, data))
        sizes[key] = {"path": files[-1].relative_to(ctx.out).as_posix(), "bytes": len(data)}
    for _, path in sorted(ctx.model_files.items()):
        files.append(write_if_changed(dist / Path(path).name, Path(path).read_bytes()))
    sizes["abis"] = {abi: {"so_bytes": len(so), "so_deflated_bytes": deflated_size(so)}
                     for abi, so in sorted(libraries.items())}
    files.append(write_if_changed(dist / "android-sizes.json", _json(sizes)))
    return files

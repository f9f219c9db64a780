"""The hermetic toolchain: zig from PyPI as the C compiler and linker for every target.

A Target says how to compile and link one (platform, ABI). Flags are size-first
(-Os, section GC, hidden visibility, stripped) except for kernels marked `speed`
in the registry, which get -O2 (the GEMM micro-kernels are where bytes buy speed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from dataclasses import dataclass, field

# The one list of symbols the library exports: the public C API (minirt.h).
# tests/test_toolchain.py checks it against the header.
C_API = (
    "mrt_build_manifest_hash",
    "mrt_session_create",
    "mrt_session_create_from_file",
    "mrt_session_create_with_options",
    "mrt_session_destroy",
    "mrt_session_get_output",
    "mrt_session_input_count",
    "mrt_session_input_data",
    "mrt_session_input_info",
    "mrt_session_last_error",
    "mrt_session_output_count",
    "mrt_session_output_data",
    "mrt_session_output_info",
    "mrt_session_run",
    "mrt_session_run_with",
    "mrt_session_set_input",
    "mrt_status_string",
    "mrt_version",
)

ZIG = (sys.executable, "-m", "ziglang")

COMMON_CFLAGS = (
    "-std=c11", "-fvisibility=hidden", "-ffunction-sections", "-fdata-sections",
    "-fno-unwind-tables", "-fno-asynchronous-unwind-tables", "-fno-stack-protector",
    "-fno-ident", "-fPIC", "-DNDEBUG", "-DMRT_BUILDING_LIBRARY=1", "-Wall", "-Wno-unused-function",
)
SIZE_CFLAGS = ("-Os",)
SPEED_CFLAGS = ("-O2",)


@dataclass(frozen=True)
class Target:
    platform: str          # linux | android | ios | python ...
    abi: str               # x86_64, aarch64, arm64-v8a, ...
    triple: str            # zig -target
    arch_cflags: tuple = ()
    link: str = "zig-shared"   # how outputs are linked: see build.link_steps
    library: str = "libminirt.so"
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        return f"{self.platform}-{self.abi}"

    def cflags(self, speed: bool) -> list[str]:
        return ["-target", self.triple, *COMMON_CFLAGS, *(SPEED_CFLAGS if speed else SIZE_CFLAGS), *self.arch_cflags]


def zig_shared_link_steps(target: Target, tdir) -> list[dict]:
    """Link a shared library with `zig cc` (targets whose libc zig carries: Linux, macOS).
    The same link runs twice: with symbols (kept for the size report) and stripped
    (the deliverable); zig's objcopy cannot strip shared objects. The deliverable's
    link also writes its ld.lld map for the size report: zig cc refuses `-Map=` but
    passes `-Wl,--print-map` through, and the SConstruct captures the map from stdout."""
    from .fsutil import write_if_changed
    vs = tdir / "exports.map"
    write_if_changed(vs, version_script())
    cmd = [*ZIG, "cc", "-target", target.triple, "-shared", "-o", "$TARGET", "$SOURCES",
           # -lpthread: glibc 2.17 (manylinux2014) keeps pthreads in libpthread.so.0;
           # --as-needed drops it from a --no-threads build, and libSystem has it on Apple.
           "-nostdlib", "-lc", f"-Wl,--version-script={vs}", "-Wl,--gc-sections", "-Wl,--as-needed",
           *(["-lpthread"] if "linux-gnu" in target.triple else []),
           f"-Wl,-soname,{target.library}", "-Wl,--build-id=sha1", "-Wl,-z,noexecstack"]
    return [{"output": f"lib/{target.library}.debug", "role": "unstripped", "command": cmd, "verb": "LINK",
             "inputs": [str(vs)]},
            {"output": f"lib/{target.library}", "role": "deliverable", "command": cmd + ["-s", "-Wl,--print-map"],
             "verb": "LINK", "inputs": [str(vs)], "map": {"output": f"lib/{target.library}.map", "via": "stdout"}}]


def zig_version() -> str:
    """The pinned compiler's version (the `ziglang` wheel's), part of every action key."""
    from importlib.metadata import version
    return version("ziglang")


def zig_lib_dir() -> Path:
    """Where the `ziglang` wheel is installed (its headers and compiler_rt)."""
    import ziglang
    return Path(ziglang.__file__).resolve().parent


def host_abi() -> str:
    import platform
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def version_script(symbols=C_API) -> str:
    body = "".join(f"    {s};\n" for s in sorted(symbols))
    return "{\n  global:\n" + body + "  local:\n    *;\n};\n"

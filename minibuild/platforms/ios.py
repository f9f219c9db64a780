"""iOS: static libraries for devices and simulators, packaged as MiniRT.xcframework
(+ a reproducible zip, its SwiftPM checksum, Package.swift and a podspec).

Each ABI compiles to a Darwin-format static archive (archive.darwin_ar). Static
archives are not linked, so "exports only the C API" means: every defined
external symbol other than the C API has hidden visibility (-fvisibility=hidden,
N_PEXT in Mach-O), which the final app link turns into a local symbol.

    MiniRT.xcframework/
      Info.plist                        AvailableLibraries + minirt's build keys
      build_info.json
      ios-arm64/libminirt.a
      ios-arm64/Headers/MiniRT/{minirt.h, module.modulemap}
      ios-arm64_x86_64-simulator/...    libminirt.a is universal (fat)

The module map sits in Headers/MiniRT/ rather than Headers/: Xcode copies every
XCFramework's Headers into one include folder, where two top-level
module.modulemap files would overwrite each other. Clang finds
<include>/MiniRT/module.modulemap for `import MiniRT`.
"""

from __future__ import annotations

import hashlib
import json
import plistlib
import sys
from pathlib import Path

import jinja2

from .. import actions, archive, buildinfo, resources
from ..fsutil import write_if_changed
from ..toolchain import Target
from . import check_package_version

IOS_MIN = "13.0"
FRAMEWORK = "MiniRT"
LIBRARY = "libminirt.a"
URL_PLACEHOLDER = f"https://example.invalid/REPLACE-ME/{FRAMEWORK}.xcframework.zip"

# LC_BUILD_VERSION platform numbers (mach-o/loader.h PLATFORM_*).
PLATFORM_IOS = 2
PLATFORM_IOS_SIMULATOR = 7


def darwin_headers() -> Path:
    """Zig ships Apple's libc headers for macOS only; the runtime's few libc
    headers (stdio, stdlib, string) are the same on iOS, so they serve iOS
    builds as the SDK's would (the symbols resolve against the app's libSystem).
    _FORTIFY_SOURCE=0 there: its checked memcpy/memset macros clash with the
    declarations in mrt_kernel.h, and the kernels need no libc checks.
    -g0: zig adds DWARF at -O2, and an archive, unlike a linked library, is
    shipped without a strip step."""
    import ziglang
    return Path(ziglang.__file__).resolve().parent / "lib" / "libc" / "include" / "any-darwin-any"


def _target(abi: str, arch: str, simulator: bool) -> Target:
    triple = f"{arch}-ios.{IOS_MIN}" + ("-simulator" if simulator else "")
    return Target("ios", abi, triple, arch_cflags=("-isystem", str(darwin_headers()), "-D_FORTIFY_SOURCE=0", "-g0"), link="static", library=LIBRARY,
                  extra={"arch": "arm64" if arch == "aarch64" else arch, "simulator": simulator})


TARGETS = {
    "arm64": _target("arm64", "aarch64", False),
    "arm64-simulator": _target("arm64-simulator", "aarch64", True),
    "x86_64-simulator": _target("x86_64-simulator", "x86_64", True),
}
DEFAULT_ABIS = ["arm64", "arm64-simulator", "x86_64-simulator"]


def link_steps(target: Target, tdir: Path) -> list[dict]:
    """One step: the objects -> a Darwin `ar` archive with a symbol table."""
    script = Path(archive.__file__).resolve()
    cmd = [sys.executable, str(script), "darwin-ar", "$TARGET", str(tdir), "$SOURCES"]
    return [{"output": f"lib/{target.library}", "role": "deliverable", "command": cmd, "verb": "AR",
             "inputs": [str(script)]}]


def slices(builds) -> list[dict]:
    """The XCFramework's libraries: one per platform variant, archs sorted."""
    groups: dict[bool, list] = {}
    for tb in builds:
        groups.setdefault(tb.target.extra["simulator"], []).append(tb)
    out = []
    for simulator in sorted(groups):
        tbs = sorted(groups[simulator], key=lambda tb: tb.target.extra["arch"])
        archs = [tb.target.extra["arch"] for tb in tbs]
        ident = "ios-" + "_".join(archs) + ("-simulator" if simulator else "")
        out.append({"id": ident, "archs": archs, "simulator": simulator, "builds": tbs})
    return out


def info_plist(libs: list[dict], info: dict) -> bytes:
    available = []
    for s in libs:
        entry = {
            "BinaryPath": LIBRARY,
            "HeadersPath": "Headers",
            "LibraryIdentifier": s["id"],
            "LibraryPath": LIBRARY,
            "SupportedArchitectures": s["archs"],
            "SupportedPlatform": "ios",
        }
        if s["simulator"]:
            entry["SupportedPlatformVariant"] = "simulator"
        available.append(entry)
    plist = {
        "AvailableLibraries": available,
        "CFBundlePackageType": "XFWK",
        "XCFrameworkFormatVersion": "1.0",
        # minirt's own keys: what this binary was built for.
        "MiniRTRuntimeVersion": info["runtime_version"],
        "MiniRTManifestHash": info["manifest_hash"],
        "MiniRTModels": info["models"],
        "MiniRTMinimumOSVersion": IOS_MIN,
    }
    return plistlib.dumps(plist, fmt=plistlib.FMT_XML, sort_keys=True)


def framework_files(libs: list[dict], info: dict) -> dict[str, bytes]:
    """{path inside MiniRT.xcframework: bytes}."""
    header = resources.path("kernels_src", "include", "minirt.h").read_bytes()
    modulemap = resources.path("packaging", "ios", "module.modulemap").read_bytes()
    files = {"Info.plist": info_plist(libs, info), "build_info.json": buildinfo.to_json(info)}
    for s in libs:
        thin = [tb.library.read_bytes() for tb in s["builds"]]
        files[f"{s['id']}/{LIBRARY}"] = thin[0] if len(thin) == 1 else archive.fat(thin)
        files[f"{s['id']}/Headers/{FRAMEWORK}/minirt.h"] = header
        files[f"{s['id']}/Headers/{FRAMEWORK}/module.modulemap"] = modulemap
    return files


def _sync_tree(root: Path, files: dict[str, bytes]) -> list[Path]:
    """Make `root` hold exactly `files` (stale files from an earlier build go)."""
    written = [write_if_changed(root / name, data) for name, data in sorted(files.items())]
    if root.is_dir():
        keep = set(written)
        for p in sorted(root.rglob("*"), reverse=True):
            if p.is_file() and p not in keep:
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()
    return written


def _render(name: str, **values) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(resources.path("packaging", "ios", name).read_text()).render(**values)


def _pod_version(opts) -> str:
    """--package-version (the runtime version when unset) for the podspec."""
    return getattr(opts, "package_version", None) or buildinfo.runtime_version()


def check_options(opts) -> None:
    """The podspec's version, checked before anything compiles."""
    check_package_version(_pod_version(opts))


def package(ctx) -> list[Path]:
    if not ctx.builds:
        return []
    from ..console import console
    dist = ctx.out / "dist"
    libs = slices(ctx.builds)
    info = buildinfo.build_info(ctx, platform="ios", minimum_os=IOS_MIN,
                                slices={s["id"]: s["archs"] for s in libs})
    files = framework_files(libs, info)
    fw_dir = dist / f"{FRAMEWORK}.xcframework"
    out = _sync_tree(fw_dir, files)

    zip_data = actions.archive(f"{FRAMEWORK}.xcframework.zip", archive.zip_bytes,
                               {f"{FRAMEWORK}.xcframework/{n}": d for n, d in files.items()})
    zip_path = write_if_changed(dist / f"{FRAMEWORK}.xcframework.zip", zip_data)
    checksum = hashlib.sha256(zip_data).hexdigest()  # what `swift package compute-checksum` prints
    out.append(zip_path)
    out.append(write_if_changed(dist / f"{FRAMEWORK}.xcframework.zip.checksum", checksum + "\n"))

    values = dict(minibuild_version=info["minibuild_version"], runtime_version=info["runtime_version"],
                  package_version=_pod_version(ctx.opts),
                  manifest_hash=info["manifest_hash"], models=", ".join(info["models"]) or "-",
                  url=URL_PLACEHOLDER, checksum=checksum, ios_major=IOS_MIN.split(".")[0],
                  ios_version=IOS_MIN, homepage="https://example.invalid/REPLACE-ME")
    out.append(write_if_changed(dist / "Package.swift", _render("Package.swift.j2", **values)))
    out.append(write_if_changed(dist / f"{FRAMEWORK}.podspec", _render("MiniRT.podspec.j2", **values)))
    out.append(write_if_changed(dist / "MiniRTSwift" / "MiniRT.swift",
                                resources.path("packaging", "ios", "MiniRT.swift").read_bytes()))

    sizes = {f"{FRAMEWORK}.xcframework.zip": len(zip_data),
             f"{FRAMEWORK}.xcframework": sum(len(d) for d in files.values())}
    for s in libs:
        sizes[f"{FRAMEWORK}.xcframework/{s['id']}/{LIBRARY}"] = len(files[f"{s['id']}/{LIBRARY}"])
        for tb in s["builds"]:
            sizes[f"{FRAMEWORK}.xcframework/{s['id']}/{LIBRARY}#{tb.target.extra['arch']}"] = tb.library.stat().st_size
    out.append(write_if_changed(dist / "ios-sizes.json", json.dumps(sizes, indent=2, sort_keys=True) + "\n"))

    console.print(f"[bold]ios[/] {fw_dir.name} ({', '.join(s['id'] for s in libs)}), "
                  f"{zip_path.name} {len(zip_data)} bytes; checksum (swift package compute-checksum):")
    console.print(checksum, markup=False, highlight=False)
    return out

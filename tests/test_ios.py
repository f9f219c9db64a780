"""The iOS XCFramework, checked without Apple tools: layout against Info.plist,
Darwin archives with symbol tables, LC_BUILD_VERSION of every object in every
slice, exported symbols = the C API, reproducible zip + SwiftPM checksum.
Mach-O is read with archive.macho_info (cross-checked against lief where it is
installed, in test_macho_parser_agrees_with_lief)."""

from __future__ import annotations

import hashlib
import json
import plistlib
import zipfile

import pytest

from minibuild import archive, toolchain
from mobilenet_like import shared_build

CPU = {"arm64": 0x0100000C, "x86_64": 0x01000007}
N_EXT, N_PEXT, N_TYPE, N_SECT = 0x01, 0x10, 0x0E, 0x0E


@pytest.fixture(scope="module")
def built():
    models, out, res, _ = shared_build()
    return out, res


@pytest.fixture(scope="module")
def fw(built):
    return built[0] / "dist" / "MiniRT.xcframework"


def _objects(lib: bytes):
    """(cputype, member name, Mach-O bytes) of every object of every slice, and
    the archives themselves."""
    thin = [s for _, _, s in archive.fat_slices(lib)] if lib[:4] == b"\xca\xfe\xba\xbe" else [lib]
    for a in thin:
        yield a, [(n, b) for n, b in archive.ar_members(a)]


def test_info_plist_matches_files(built, fw):
    out, res = built
    plist = plistlib.loads((fw / "Info.plist").read_bytes())
    assert plist["CFBundlePackageType"] == "XFWK"
    assert plist["XCFrameworkFormatVersion"] == "1.0"
    assert plist["MiniRTManifestHash"] == res.scan.manifest.hash
    assert plist["MiniRTRuntimeVersion"] == "0.1.0"
    libs = {e["LibraryIdentifier"]: e for e in plist["AvailableLibraries"]}
    assert set(libs) == {"ios-arm64", "ios-arm64_x86_64-simulator"}
    assert "SupportedPlatformVariant" not in libs["ios-arm64"]
    assert libs["ios-arm64_x86_64-simulator"]["SupportedPlatformVariant"] == "simulator"
    expected_files = {"Info.plist", "build_info.json"}
    for ident, e in libs.items():
        assert e["SupportedPlatform"] == "ios"
        lib = (fw / ident / e["LibraryPath"]).read_bytes()
        if len(e["SupportedArchitectures"]) > 1:
            cpus = sorted(c for c, _, _ in archive.fat_slices(lib))
        else:
            cpus = [archive.macho_cpu(lib)[0]]
        assert cpus == sorted(CPU[a] for a in e["SupportedArchitectures"])
        headers = fw / ident / e["HeadersPath"] / "MiniRT"
        assert "module MiniRT" in (headers / "module.modulemap").read_text()
        assert "mrt_session_create" in (headers / "minirt.h").read_text()
        expected_files |= {f"{ident}/{e['LibraryPath']}", f"{ident}/Headers/MiniRT/module.modulemap",
                           f"{ident}/Headers/MiniRT/minirt.h"}
    on_disk = {p.relative_to(fw).as_posix() for p in fw.rglob("*") if p.is_file()}
    assert on_disk == expected_files
    info = json.loads((fw / "build_info.json").read_text())
    assert info["manifest_hash"] == res.scan.manifest.hash and info["runtime_version"] == "0.1.0"


def test_archives_are_darwin_with_symbol_table_and_build_version(fw):
    seen = set()
    for ident, platform in (("ios-arm64", 2), ("ios-arm64_x86_64-simulator", 7)):
        lib = (fw / ident / "libminirt.a").read_bytes()
        for a, members in _objects(lib):
            assert a.startswith(b"!<arch>\n#1/"), "BSD/Darwin member headers expected"
            names = [n for n, _ in members]
            assert names[0] in ("__.SYMDEF", "__.SYMDEF SORTED"), names[:2]
            objs = names[1:]
            assert objs == sorted(objs) and len(set(objs)) == len(objs)
            assert "runtime-session.o" in objs and "gen-registry.o" in objs
            for name, body in members[1:]:
                m = archive.macho_info(body)
                assert m["platform"] == platform, f"{ident}/{name}: LC_BUILD_VERSION platform {m['platform']}"
                assert tuple(int(x) for x in m["minos"].split(".")) >= (13, 0)
                seen.add((ident, m["cputype"]))
    assert seen == {("ios-arm64", CPU["arm64"]), ("ios-arm64_x86_64-simulator", CPU["arm64"]),
                    ("ios-arm64_x86_64-simulator", CPU["x86_64"])}


def test_only_the_c_api_has_default_visibility(fw):
    for ident in ("ios-arm64", "ios-arm64_x86_64-simulator"):
        for a, members in _objects((fw / ident / "libminirt.a").read_bytes()):
            exported, hidden = set(), set()
            for name, body in members[1:]:
                for sym, t in archive.macho_info(body)["symbols"]:
                    if t & N_EXT and (t & N_TYPE) == N_SECT:
                        (hidden if t & N_PEXT else exported).add(sym)
            assert exported == {"_" + f for f in toolchain.C_API}, (ident, exported ^ {"_" + f for f in toolchain.C_API})
            assert hidden, "kernels and runtime internals should be private extern"


def test_zip_is_reproducible_and_checksum_published(built, fw):
    out, _ = built
    dist = out / "dist"
    data = (dist / "MiniRT.xcframework.zip").read_bytes()
    with zipfile.ZipFile(dist / "MiniRT.xcframework.zip") as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in infos)
        assert names[0] == "MiniRT.xcframework/"
        for i in infos:
            if not i.is_dir():
                assert zf.read(i) == (dist / i.filename).read_bytes()
    # the same tree zips to the same bytes
    assert archive.zip_bytes(archive.tree(fw, "MiniRT.xcframework")) == data
    checksum = hashlib.sha256(data).hexdigest()
    assert (dist / "MiniRT.xcframework.zip.checksum").read_text().strip() == checksum
    assert f'checksum: "{checksum}"' in (dist / "Package.swift").read_text()
    podspec = (dist / "MiniRT.podspec").read_text()
    assert "s.vendored_frameworks = 'MiniRT.xcframework'" in podspec and checksum in podspec
    assert (dist / "MiniRTSwift" / "MiniRT.swift").is_file()


def test_sizes_json(built):
    dist = built[0] / "dist"
    sizes = json.loads((dist / "ios-sizes.json").read_text())
    for k, v in sizes.items():
        if "#" not in k and (dist / k).is_file():
            assert (dist / k).stat().st_size == v
    assert sizes["MiniRT.xcframework.zip"] == (dist / "MiniRT.xcframework.zip").stat().st_size


def test_fat_header_round_trip():
    a = b"\xcf\xfa\xed\xfe" + (0x0100000C).to_bytes(4, "little") + b"\0" * 24
    b = b"\xcf\xfa\xed\xfe" + (0x01000007).to_bytes(4, "little") + b"\x03\0\0\0" + b"\0" * 20
    f = archive.fat([a, b])
    assert f[:8] == b"\xca\xfe\xba\xbe\0\0\0\x02"
    sl = archive.fat_slices(f)
    assert [(c, s) for c, s, _ in sl] == [(0x01000007, 3), (0x0100000C, 0)]
    assert [d for _, _, d in sl] == [b, a]


def test_macho_parser_agrees_with_lief(fw):
    lief = pytest.importorskip("lief")
    lief.logging.disable()
    lib = (fw / "ios-arm64" / "libminirt.a").read_bytes()
    for name, body in archive.ar_members(lib)[1:]:
        fat_bin = lief.MachO.parse(list(body))  # keep the container alive while its binary is used
        b = fat_bin.at(0)
        mine = archive.macho_info(body)
        assert mine["platform"] == int(b.build_version.platform)
        assert mine["symbols"] == [(s.name, s.raw_type) for s in b.symbols]

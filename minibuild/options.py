"""Build options: what a build is asked to do, parsed and checked before any step runs.

The command line (cli.py) fills an `Options`; `check` rejects an unknown platform, ABI
or option value before anything is scanned or written, so a typo costs nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import MinibuildError


# --tune: `speed` compiles the registry's `speed` kernels with -O2 and keeps their
# wider SIMD variants (AVX-512 where the target may have it); `size` compiles every
# object with -Os and only the baseline variant of each kernel, and leaves the thread
# pool out unless threads are asked for (--threads).
TUNES = ("speed", "size")


@dataclass
class Options:
    models: Path
    out: Path
    platforms: list[str] = field(default_factory=lambda: ["linux"])
    abis: list[str] | None = None
    fixed_dims: dict[str, int] = field(default_factory=dict)
    input_shapes: dict[str, tuple] = field(default_factory=dict)
    jobs: int | None = None
    verbose: bool = False
    messages: bool = True
    threads: bool | None = None                    # the thread pool; None: as tune says (speed: yes, size: no)
    tune: str = "speed"                            # speed: -O2 and SIMD variants for `speed` kernels; size: -Os only
    android_name: str = "minirt"                   # Android: OUT/dist/<android_name>-<package_version>.aar
    android_package: str = "ai.minibuild.minirt"   # Android: the AAR manifest's package (namespace)
    package_version: str = "0.1.0"                 # version written into packages (AAR, prefab)
    android_prefab: str = "separate"               # Android: prefab package in its own AAR | bundled | none
    size_history: Path | None = None     # SQLite size history (default OUT/size_history.sqlite; env MINIBUILD_SIZE_HISTORY)
    size_budget: str | None = None       # bytes (all libraries) or a YAML file of limits: see docs/size_report.md
    size_baseline: Path | None = None    # an earlier size_report.json to compare with (default: last build in the history)
    profile: Path | None = None          # write a Chrome trace of the build here (minibuild/profile.py)
    model_files: list[Path] | None = None  # the models, when a glob chose them (else every .onnx under `models`)
    remote_cache: str | None = None      # Bazel HTTP cache URL (URL/ac/, URL/cas/); env MINIBUILD_REMOTE_CACHE
    remote_headers: dict[str, str] = field(default_factory=dict)  # extra request headers (auth)
    remote_read_only: bool = False       # read from the remote cache, never write (untrusted builds)


def parse_headers(values: list[str] | None) -> dict[str, str]:
    """--remote-header NAME=VALUE (repeatable) -> {NAME: VALUE}."""
    out = {}
    for v in values or []:
        name, sep, value = v.partition("=")
        if not sep or not name.strip():
            raise MinibuildError(f"--remote-header {v!r}: expected NAME=VALUE, e.g. 'Authorization=Bearer TOKEN'")
        out[name.strip()] = value
    return out


def remote_env(opts: Options) -> dict[str, str]:
    """The environment that tells the compile actions about the remote cache (the
    SCons process reads it; secrets in headers never reach a file)."""
    import json
    import os
    url = opts.remote_cache or os.environ.get("MINIBUILD_REMOTE_CACHE")
    if not url:
        return {}
    env = {"MINIBUILD_REMOTE_CACHE": url}
    if opts.remote_headers:
        env["MINIBUILD_REMOTE_HEADERS"] = json.dumps(opts.remote_headers)
    if opts.remote_read_only:
        env["MINIBUILD_REMOTE_READ_ONLY"] = "1"
    return env


def parse_fix_dims(values: list[str] | None) -> dict[str, int]:
    """--fix-dim NAME=N (repeatable) -> {NAME: N}."""
    out = {}
    for v in values or []:
        name, _, n = v.partition("=")
        if not name or not n.isdigit() or int(n) < 1:
            raise MinibuildError(f"--fix-dim {v}: expected NAME=N with N >= 1, e.g. --fix-dim batch=1")
        out[name] = int(n)
    return out


def parse_input_shapes(values: list[str] | None) -> dict[str, tuple]:
    """--input-shape INPUT=D0,D1,... (repeatable) -> {INPUT: (D0, D1, ...)}."""
    out = {}
    for v in values or []:
        name, _, dims = v.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not name or not shape or min(shape) < 0:
            raise MinibuildError(f"--input-shape {v}: expected INPUT=D0,D1,..., e.g. --input-shape input=1,3,224,224")
        out[name] = shape
    return out


def resolve_targets(opts: Options) -> tuple[list[str], dict[str, list]]:
    """The platforms asked for, in order, and the toolchain targets of each.
    Raises ValueError naming the unknown platform or ABI and the known ones."""
    from . import platforms
    names = platforms.expand(opts.platforms)
    if opts.abis and len(names) > 1:  # --abi with several platforms: each takes the ABIs it has
        wanted = {p: [t for t in platforms.targets(p) if t.abi in opts.abis] for p in names}
        if not any(wanted.values()):
            raise ValueError(f"no platform of {', '.join(names)} has ABI(s) {', '.join(opts.abis)}")
    else:
        wanted = {p: platforms.targets(p, opts.abis) for p in names}
    return names, wanted


def check(opts: Options) -> tuple[list[str], dict[str, list]]:
    """Every option a build reads, checked before anything is scanned or written:
    platforms, ABIs, -j, and each platform's packaging options (names, versions)."""
    from . import platforms
    if opts.tune not in TUNES:
        raise ValueError(f"--tune {opts.tune}: expected one of {', '.join(TUNES)}")
    if opts.threads is None:
        opts.threads = opts.tune == "speed"
    if opts.jobs is not None and opts.jobs < 1:
        raise ValueError(f"-j {opts.jobs}: expected a number of parallel jobs >= 1")
    url = opts.remote_cache
    if url and not url.startswith(("http://", "https://", "grpc://", "grpcs://")):
        raise ValueError(f"--remote-cache {url}: expected an http(s):// URL of a Bazel HTTP cache (bazel-remote, "
                         "nginx with WebDAV) or grpc(s)://HOST:PORT[/INSTANCE] of a Remote Execution API cache")
    names, wanted = resolve_targets(opts)
    for name in names:
        chk = getattr(platforms.get(name), "check_options", None)
        if chk:
            chk(opts)
    return names, wanted

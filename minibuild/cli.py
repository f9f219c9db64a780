"""The `minibuild` command.

    minibuild --models DIR --platform P --out OUT         build (the default command)
    minibuild scan --models DIR --out OUT                 manifest only
    minibuild verify --models DIR --out OUT [--json F]    compare with onnxruntime
    minibuild size history|diff|estimate|calibrate ...    size reports (minibuild size --help)
    minibuild query why|deps|kernels ...                  provenance and bytes (minibuild query --help)
    minibuild cache stats | gc --max-size 2G              the action cache (MINIBUILD_CACHE)
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from . import __version__, platforms as platforms_mod
from .errors import MinibuildError
from . import workspace as workspace_mod
from .options import TUNES, Options, parse_fix_dims, parse_headers, parse_input_shapes

COMMANDS = ("build", "scan", "verify", "size", "query", "cache")


def _common(p: argparse.ArgumentParser, command: str):
    p.add_argument("--models", required=command != "build", type=Path,
                   help="folder of .onnx models (searched recursively)"
                   + ("; without it, the targets of the workspace file are built" if command == "build" else ""))
    p.add_argument("--out", type=Path, default=Path("minibuild-out"), help="output folder (default: minibuild-out)")
    p.add_argument("--fix-dim", action="append", metavar="NAME=N", help="give a symbolic dimension a size (repeatable)")
    p.add_argument("--input-shape", action="append", metavar="INPUT=D0,D1,...", help="set an input's shape (repeatable)")


DESCRIPTIONS = {
    "build": "Build the smallest runtime that runs exactly the models in --models: scan and optimise "
             "them, write the manifest, compile only the kernels it lists, convert the models, package "
             "for each --platform, and write the size report.",
    "scan": "Scan and optimise the models in --models and write the manifest of the operators and "
            "element types they need (OUT/manifest/), without compiling. Fails, naming every "
            "model/node/op/opset/type, when a kernel is missing.",
    "verify": "Run every model in --models on the library a build wrote to --out and on onnxruntime "
              "(one thread, same seeded inputs); print the max error and both latencies per output. "
              "Exits 1 when an output differs beyond tolerance.",
}


def _platforms_epilog() -> str:
    lines = ["platforms (--platform, a comma list, or 'all'):"]
    for name in platforms_mod.ALL:
        mod = platforms_mod.get(name)
        first = " ".join((mod.__doc__ or "").strip().split("\n\n")[0].split())  # the docstring's first paragraph
        lines += textwrap.wrap(first, 96, initial_indent=f"  {name:8} ", subsequent_indent=" " * 11)
        lines.append(f"  {'':8} ABIs: {', '.join(mod.TARGETS)} (default: {', '.join(mod.DEFAULT_ABIS)})")
    return "\n".join(lines) + "\n\ncommands:\n" + __doc__.split("\n\n", 1)[1]


def parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"minibuild{'' if command == 'build' else ' ' + command}",
                                description=DESCRIPTIONS[command], epilog=_platforms_epilog(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"minibuild {__version__}")
    _common(p, command)
    if command in ("build", "verify"):
        p.add_argument("--platform", default="linux",
                       help=f"{', '.join(platforms_mod.ALL)}, a comma list, or 'all' (default: linux)")
        p.add_argument("--abi", action="append", help="build only these ABIs (repeatable)")
        p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: CPU count)")
        p.add_argument("--verbose", action="store_true", help="print full compiler command lines")
        p.add_argument("--no-messages", action="store_true", help="compile error messages out of the runtime (smaller)")
        pool = p.add_mutually_exclusive_group()
        pool.add_argument("--no-threads", action="store_true",
                          help="build without the thread pool (no pthreads; sessions run on the caller's thread)")
        pool.add_argument("--threads", action="store_true",
                          help="build the thread pool in (the default, except with --tune size)")
        p.add_argument("--tune", choices=TUNES, default=None,
                       help="speed (default): -O2 and the wider SIMD variants for the kernels where bytes buy speed; "
                       "size: every object -Os, baseline variants only (the smallest library)")
        p.add_argument("--package-version", default="0.1.0", help="version of the packages written (default: 0.1.0)")
        p.add_argument("--android-name", default="minirt", help="Android: AAR name, OUT/dist/NAME-VERSION.aar")
        p.add_argument("--android-package", default="ai.minibuild.minirt",
                       help="Android: package (namespace) in the AAR's manifest")
        p.add_argument("--android-prefab", choices=("separate", "bundled", "none"), default="separate",
                       help="Android: the prefab package (C/C++ via CMake) in its own AAR, NAME-prefab-VERSION.aar "
                       "(separate, default), inside the main AAR (bundled), or not at all (none)")
    if command == "build":
        p.add_argument("names", nargs="*", metavar="TARGET",
                       help="workspace targets to build (default: all); only without --models")
        p.add_argument("--workspace", type=Path, metavar="FILE",
                       help=f"the workspace file (default: ./{workspace_mod.FILE_NAME} when there is one)")
        p.add_argument("--size-history", type=Path, help="SQLite size history (default OUT/size_history.sqlite, "
                       "or $MINIBUILD_SIZE_HISTORY)")
        p.add_argument("--size-budget", metavar="BYTES|FILE", help="fail (exit 3) when the libraries exceed BYTES in "
                       "total, or the limits of a YAML FILE (docs/size_report.md)")
        p.add_argument("--remote-cache", metavar="URL", help="share compile results through a Bazel HTTP cache "
                       "(URL/ac/, URL/cas/: bazel-remote, nginx WebDAV); default $MINIBUILD_REMOTE_CACHE")
        p.add_argument("--remote-header", action="append", metavar="NAME=VALUE",
                       help="an extra header for the remote cache, e.g. 'Authorization=Bearer TOKEN' (repeatable)")
        p.add_argument("--remote-read-only", action="store_true",
                       help="read from the remote cache but never write to it (pull-request builds)")
        p.add_argument("--profile", type=Path, metavar="TRACE.json",
                       help="write a Chrome trace of the build (every step and compile/link action) to this file")
        p.add_argument("--size-baseline", type=Path, metavar="REPORT.json",
                       help="compare with this size_report.json (default: the last build in the size history)")
    if command == "verify":
        p.add_argument("--json", type=Path, help="also write the results as JSON to this file")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--runs", type=int, default=5, help="timed runs per model and engine")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "build"
    if command == "cache":
        return _cache_command(argv)
    if command == "query":
        from . import query
        return query.main(argv)
    if command == "size":
        from . import size_cli
        return size_cli.main(argv)
    args = parser(command).parse_args(argv)
    from .console import print_error
    try:
        if command == "build" and args.models is None:
            return _build_workspace(args)
        if getattr(args, "names", None):
            raise MinibuildError(f"target names ({', '.join(args.names)}) are for workspace builds; "
                                 "leave out --models to build the targets of minibuild.yaml")
        platforms = [p for p in getattr(args, "platform", "linux").split(",") if p]
        opts = Options(models=args.models, out=args.out, platforms=platforms, abis=getattr(args, "abi", None),
                       fixed_dims=parse_fix_dims(args.fix_dim), input_shapes=parse_input_shapes(args.input_shape),
                       jobs=getattr(args, "jobs", None), verbose=getattr(args, "verbose", False),
                       messages=not getattr(args, "no_messages", False),
                       threads=_threads(args),
                       tune=getattr(args, "tune", None) or "speed",
                       package_version=getattr(args, "package_version", "0.1.0"),
                       android_name=getattr(args, "android_name", "minirt"),
                       android_package=getattr(args, "android_package", "ai.minibuild.minirt"),
                       android_prefab=getattr(args, "android_prefab", "separate"),
                       size_history=getattr(args, "size_history", None), size_budget=getattr(args, "size_budget", None),
                       size_baseline=getattr(args, "size_baseline", None), profile=getattr(args, "profile", None),
                       remote_cache=getattr(args, "remote_cache", None),
                       remote_headers=parse_headers(getattr(args, "remote_header", None)),
                       remote_read_only=getattr(args, "remote_read_only", False))
        if command == "scan":
            from .console import console
            from .pipeline import run_scan
            res = run_scan(opts)
            console.print(f"manifest: {len(res.manifest.entries)} entries -> {Path(args.out) / 'manifest'}")
            return 0
        if command == "build":
            return _noop_or(_stamp([opts], Path(args.out) / "build"), lambda: _run_build(opts), opts.profile)
        if command == "verify":
            from .verify import run_verify
            return run_verify(opts, json_path=args.json, seed=args.seed, runs=args.runs)
    except MinibuildError as e:
        print_error(str(e))
        return e.exit_code
    except ValueError as e:
        print_error(str(e))
        return 2
    return 0


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected bytes, or a size such as 500M or 2G") from None


def _cache_command(argv) -> int:
    import json
    from .cache import LocalCache, default_root
    p = argparse.ArgumentParser(prog="minibuild cache", description="The action cache: compile results shared by "
                                "every build folder and checkout on this machine (MINIBUILD_CACHE, default "
                                "~/.cache/minibuild).")
    sub_p = p.add_subparsers(dest="cmd", required=True)
    sub_p.add_parser("stats", help="entries and bytes")
    g = sub_p.add_parser("gc", help="delete the least recently used entries down to a size")
    g.add_argument("--max-size", type=_size, required=True, metavar="SIZE", help="e.g. 2G, 500M, or bytes")
    args = p.parse_args(argv)
    cache = LocalCache(default_root())
    if args.cmd == "stats":
        print(json.dumps(cache.stats(), indent=1))
    else:
        print(json.dumps(cache.gc(args.max_size), indent=1))
    return 0


def _build_workspace(args) -> int:
    from .pipeline import run_builds
    path = workspace_mod.find(args.workspace)
    if path is None:
        raise MinibuildError(f"no --models and no {workspace_mod.FILE_NAME} here: give --models DIR, "
                             f"or --workspace FILE, or run where a {workspace_mod.FILE_NAME} is")
    from . import options as options_mod
    ws = workspace_mod.load(path)
    chosen = ws.select(args.names)
    for name, opts in chosen.items():  # the command line's own options apply to every target
        opts.jobs = args.jobs or opts.jobs
        opts.verbose = args.verbose
        opts.remote_cache = args.remote_cache
        opts.remote_headers = parse_headers(args.remote_header)
        opts.remote_read_only = args.remote_read_only
        if args.no_messages:
            opts.messages = False
        if _threads(args) is not None:
            opts.threads = _threads(args)
        if args.tune:
            opts.tune = args.tune
        try:
            options_mod.check(opts)
        except ValueError as e:
            raise MinibuildError(f"{path}: targets.{name}: {e}") from None
    def go():
        run_builds(list(chosen.values()), profile=args.profile, build_root=ws.out / ".build", labels=list(chosen))
    stamp = _stamp(list(chosen.values()), ws.out / ".build", extra=[path], names=list(chosen))
    return _noop_or(stamp, go, args.profile)


def _run_build(opts):
    from .pipeline import run_build
    run_build(opts)


# Options that change nothing a build writes: not part of the no-op stamp's key.
def _threads(args) -> bool | None:
    """--threads / --no-threads; None when neither is given (the tune decides)."""
    if getattr(args, "no_threads", False):
        return False
    return True if getattr(args, "threads", False) else None


_NOT_IN_KEY = ("jobs", "verbose", "profile", "remote_cache", "remote_headers", "remote_read_only")


def _stamp(all_opts, state: Path, extra=(), names=()):
    """The no-op stamp of a build of `all_opts` (minibuild/stamp.py)."""
    import dataclasses
    from .stamp import Stamp
    key, inputs, outputs = [list(names)], list(extra), [state]
    for o in all_opts:
        d = {k: v for k, v in dataclasses.asdict(o).items() if k not in _NOT_IN_KEY}
        key.append(d)
        inputs.append(Path(o.models))
        inputs += [Path(f) for f in (o.model_files or [])]
        for f in (o.size_budget, o.size_baseline):
            if f is not None and Path(str(f)).is_file():
                inputs.append(Path(str(f)))
        outputs.append(Path(o.out))
    return Stamp(key, inputs, outputs, state)


def _noop_or(stamp, build, profile) -> int:
    """Skip the build when its stamp says nothing changed; else build and stamp it."""
    import time
    t0 = time.time()
    why = stamp.up_to_date()
    if why is None:
        print(f"up to date: nothing changed since the last build; 0 action(s) run (0 from the local cache, "
              f"0 from the remote cache, 0 executed) in {time.time() - t0:.2f}s", file=sys.stderr)
        if profile:
            from .profile import Profile
            prof = Profile()
            prof.add("no-op check (stamp): up to date", "stamp", t0, time.time())
            prof.write(profile)
        return 0
    snap = stamp.snapshot()   # before the build: an edit made while it runs is seen next time
    stamp.invalidate()
    build()
    stamp.write(snap)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The flow of DESIGN.md, one direction: scan -> manifest -> select -> codegen ->
compile -> convert -> package. Each step's module does the work; this one orders them."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from . import actions, build, codegen, manifest as manifest_mod, options as options_mod, platforms, prepare, profile as profile_mod, \
    registry as registry_mod, report, scan
from .console import console
from .fsutil import write_if_changed
from .options import Options


@dataclass
class ScanResult:
    registry: registry_mod.Registry
    models: list[scan.ScannedModel]
    needs: list[scan.NodeNeed]
    manifest: manifest_mod.Manifest


@dataclass
class BuildResult:
    scan: ScanResult
    model_files: dict[str, Path]
    targets: list[build.TargetBuild]
    steps_run: list[str]
    outputs: dict[str, list[Path]]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=console, transient=True)


def run_scan(opts: Options, registry: registry_mod.Registry | None = None, select: bool = True,
             prof=profile_mod.NULL) -> ScanResult:
    """Scan, optimise and write the manifest; then (unless `select` is False, for
    questions about a model set a build could not serve) fail on every missing kernel."""
    registry = registry or registry_mod.load()
    paths = scan.find_models(opts.models, opts.model_files)
    models = []
    with _progress() as progress:
        task = progress.add_task("scan + optimise", total=len(paths))
        for p in paths:
            progress.update(task, description=f"scan + optimise {p.name}")
            with prof.span(f"scan + optimise {p.name}", "scan", model=p.name):
                models.append(scan.scan_model(p, registry, opts.fixed_dims, opts.input_shapes, root=opts.models))
            progress.advance(task)
    with prof.span("manifest", "manifest"):
        needs = [n for m in models for n in scan.needs(m, registry)]
        manifest = manifest_mod.build(models, needs)
        manifest.write(Path(opts.out) / "manifest")
    if select:
        with prof.span("select", "select"):
            manifest_mod.select(registry, models, needs)
    return ScanResult(registry, models, needs, manifest)


def convert_models(result: ScanResult, out_dir: Path, opts: Options | None = None) -> dict[str, Path]:
    """Each model's .mrt, a cached action (minibuild/actions.py) keyed by the model's
    bytes (external data too), the needs the scan found in it (the registry's say in
    its rewrites and types), the options that shape it and the onnx and numpy versions
    (minibuild's own code is in every key)."""
    import numpy
    import onnx
    files = {}
    for m in result.models:
        mine = sorted(repr(n) for n in result.needs if n.model == m.name)
        parts = [m.sha256, m.name, actions.registry_digest(), *mine, onnx.__version__, numpy.__version__]
        if opts is not None:
            parts += [sorted(opts.fixed_dims.items()), sorted((k, list(v)) for k, v in opts.input_shapes.items())]
        data = actions.cached("convert", f"{m.name}.mrt", parts,
                              lambda m=m: {"mrt": prepare.convert_model(m, result.needs)})["mrt"]
        files[m.name] = write_if_changed(Path(out_dir) / f"{m.name}.mrt", data)
    return files


def run_build(opts: Options) -> BuildResult:
    return run_builds([opts], profile=opts.profile)[0]


def run_builds(all_opts: list[Options], profile: Path | None = None, build_root: Path | None = None,
               labels: list[str] | None = None) -> list[BuildResult]:
    """Build several option sets (a workspace's targets) in one SCons graph: every
    target is checked before anything is scanned, scanned and planned, then all
    compile and link actions run in one parallel SCons run (its state in
    `build_root`, default the only target's OUT/build), then each is packaged and
    reported into its own output folder."""
    prof = profile_mod.Profile() if profile else profile_mod.NULL
    t0 = time.monotonic()
    checked = [options_mod.check(o) for o in all_opts]  # nothing scanned or written yet
    with contextlib.ExitStack() as locks:
        # Two builds into one output folder would overwrite each other's files: one waits.
        folders = {Path(o.out).resolve() for o in all_opts}
        if build_root:
            folders.add(Path(build_root).resolve().parent)
        for folder in sorted(folders):
            locks.enter_context(build.OutputLock(folder))
        return _run_locked(all_opts, checked, prof, t0, profile, build_root, labels)


def _run_locked(all_opts, checked, prof, t0, profile, build_root, labels) -> list[BuildResult]:
    runner = actions.running(prof, options_mod.remote_env(all_opts[0]))
    py_actions = runner.__enter__()
    try:
        staged = [_stage(o, names, wanted, prof, label)
                  for o, (names, wanted), label in zip(all_opts, checked, labels or [None] * len(all_opts))]
        root = Path(build_root).resolve() if build_root else staged[0].out / "build"
        plans = [p for st in staged for p in st.plans]
        console.print(f"[bold]compile[/] {len(plans)} target(s): {', '.join(p['name'] for p in plans)}")
        with prof.span("compile + link (SCons)", "compile", targets=[p["name"] for p in plans]):
            steps = build.run_scons(plans, root, all_opts[0].jobs, all_opts[0].verbose,
                                    log=lambda line: console.print(line, markup=False),
                                    extra_env=py_actions.remote_env())
        # SCons rewrites the action log only when it spawned something.
        ran = 0 if not steps else prof.add_actions(build.actions_file(root)) if profile else None
        if not steps:
            console.print("  nothing to compile: everything is up to date")
        results = []
        try:
            for st in staged:
                results.append(_finish(st, steps, prof))
        finally:
            build.write_python_actions(root, py_actions.records)
            console.print(f"[bold]done[/] in {time.monotonic() - t0:.1f}s: "
                          f"{_action_summary(plans, root, ran, py_actions.records)}"
                          f" -> {', '.join(str(st.out) for st in staged)}")
        return results
    finally:
        runner.__exit__(None, None, None)
        if profile:
            prof.write(profile)
            console.print(f"profile -> {profile} (open in ui.perfetto.dev or chrome://tracing)", markup=False)


@dataclass
class _Staged:
    opts: Options
    out: Path
    names: list[str]
    wanted: dict
    result: ScanResult
    plans: list[dict]
    builds: list[build.TargetBuild]


def _stage(opts: Options, names, wanted, prof, label: str | None = None) -> _Staged:
    """scan -> manifest -> select -> codegen -> plan, for one option set."""
    out = Path(opts.out).resolve()
    with prof.span(f"target {label}" if label else "scan", "target"):
        result = run_scan(opts, prof=prof)
    console.print(f"[bold]manifest[/]{' ' + label if label else ''} {len(result.manifest.entries)} operator entries "
                  f"from {len(result.models)} model(s), hash {result.manifest.hash[:12]}")
    # codegen: the kernel table and config.h depend on the manifest only, so every target shares them.
    gen = out / "build" / "gen"
    with prof.span("codegen", "codegen"):
        codegen.render(result.registry, result.manifest, gen, messages=opts.messages, threads=opts.threads,
                       tune=opts.tune)
    # A target two platforms share (python's wheels reuse linux's libraries) compiles once.
    targets = list({t.name: t for p in names for t in wanted[p]}.values())
    plans, builds = [], []
    for t in targets:
        plan, tb = build.plan_target(t, result.registry, result.manifest, out / "build", gen=gen, tune=opts.tune)
        if label:
            plan["name"] = f"{label}/{plan['name']}"
        plans.append(plan)
        builds.append(tb)
    return _Staged(opts, out, names, wanted, result, plans, builds)


def _finish(st: _Staged, steps: list[str], prof) -> BuildResult:
    """convert -> package -> report, for one option set whose libraries are built."""
    with prof.span("convert", "convert", models=len(st.result.models)):
        model_files = convert_models(st.result, st.out / "models", st.opts)
    outputs = {}
    for name in st.names:
        mine = {t.name for t in st.wanted[name]}
        ctx = platforms.PackageContext(st.opts, st.result, model_files, [b for b in st.builds if b.target.name in mine],
                                       st.out)
        with prof.span(f"package {name}", "package"):
            outputs[name] = platforms.get(name).package(ctx)
    built = BuildResult(st.result, model_files, st.builds, steps, outputs)
    with prof.span("size report", "report"):
        report.write_reports(st.opts, built)  # raises report.budget.SizeBudgetError, after writing, when over budget
    return built


def _action_summary(plans: list[dict], build_root: Path, ran: int | None, py_actions=()) -> str:
    """"N actions run (H from the local cache), M up to date": what SCons spawned out of
    what the plans declare, from the action log of this run, and the Python-side
    actions (codegen, convert, javac, package: minibuild/actions.py), which always run
    and are hits when nothing they read changed."""
    path = build.actions_file(build_root)
    actions = []
    if ran != 0 and path.is_file():
        for line in path.read_text().splitlines():
            try:
                actions.append(json.loads(line))
            except ValueError:
                pass
    total = sum(len(p["objects"]) + len(p["links"]) for p in plans)
    up_to_date = max(total - len(actions), 0)
    actions = actions + list(py_actions)
    local = sum(1 for a in actions if a.get("cache") == "hit-local")
    remote = sum(1 for a in actions if a.get("cache") == "hit-remote")
    return (f"{len(actions)} action(s) run ({local} from the local cache, {remote} from the remote cache, "
            f"{len(actions) - local - remote} executed), {up_to_date} up to date")

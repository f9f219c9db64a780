"""`minibuild size calibrate`: re-measure the kernel size table that `minibuild size
estimate` predicts from (minibuild/data/kernel_sizes.json).

Per target it builds two libraries -- every registry kernel, and a single kernel
without support units -- attributes both with the size report, and keeps each
kernel's and support unit's bytes, the runtime core, and a linear model (fixed + per
kernel) for the rest (registry table, linker overhead, padding, shared constants).

This runs builds, so it sits above `build` in the flow; the size report it uses
(report.attribution, report.estimate) only reads what a build left behind.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import __version__, build as build_mod, manifest as manifest_mod, platforms, registry as registry_mod
from .report import attribution, estimate


def _measure(target, registry, manifest, root: Path, jobs: int | None) -> dict:
    plan, tb = build_mod.plan_target(target, registry, manifest, root / "build")
    build_mod.run_scons([plan], root / "build", jobs)
    att = attribution.attribute_target(tb)
    L = att.ledger
    groups = dict.fromkeys(("runtime", "kernels", "support") + estimate.LINEAR, 0)
    kernels, support = {}, {}
    for c in L.components.values():
        g = {"runtime": "runtime", "kernel": "kernels", "support": "support", "external": "external",
             "shared": "shared"}.get(c.kind, "glue")
        groups[g] += c.bytes
        if c.kind == "kernel":
            kernels[f"{c.op}:{c.dtype}"] = c.bytes
        elif c.kind == "support":
            support[c.name.split("/", 1)[1]] = c.bytes
    groups["overhead"] = sum(L.overhead.values())
    groups["unattributed"] = sum(L.unattributed.values())
    return {"file_size": att.file_size, "groups": groups, "kernels": kernels, "support": support,
            "n_kernels": len(kernels), "method": att.method}


def _manifest_of(keys: list[tuple[str, str, str]], registry) -> manifest_mod.Manifest:
    by_op: dict[tuple, list[str]] = {}
    for d, op, dt in keys:
        by_op.setdefault((d, op), []).append(dt)
    entries = []
    for (d, op), dts in sorted(by_op.items()):
        e = registry.get(d, op)
        entries.append(manifest_mod.Entry(d, op, e.since_min, e.type_constraint, sorted(dts)))
    return manifest_mod.Manifest(models=[], entries=entries)


def calibrate(platform_names: list[str], abis: list[str] | None = None, work: Path | None = None,
              table: Path | None = None, jobs: int | None = None, log=print) -> dict:
    registry = registry_mod.load()
    all_keys = sorted((e.domain, e.op, dt) for e in registry.ops.values() for dt in e.kernels)
    # The smallest build: one kernel without support units.
    small_key = next(k for k in all_keys if not registry.get(k[0], k[1]).requires)
    doc = estimate.load_table(table)
    doc["format"] = 1
    doc["minibuild_version"] = __version__
    doc.setdefault("targets", {})
    tmp = None
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="minibuild-calibrate-")
        work = Path(tmp.name)
    try:
        for pname in platforms.expand(platform_names):
            for target in platforms.targets(pname, abis):
                log(f"calibrate {target.name}: all {len(all_keys)} kernels, then 1 kernel")
                full = _measure(target, registry, _manifest_of(all_keys, registry), Path(work) / target.name / "full", jobs)
                one = _measure(target, registry, _manifest_of([small_key], registry), Path(work) / target.name / "one", jobs)
                dn = max(1, full["n_kernels"] - one["n_kernels"])
                linear = {}
                for g in estimate.LINEAR:
                    per = (full["groups"][g] - one["groups"][g]) / dn
                    linear[g] = {"fixed": round(one["groups"][g] - per * one["n_kernels"], 1), "per_kernel": round(per, 2)}
                doc["targets"][target.name] = {
                    "triple": target.triple,
                    "method": full["method"],
                    "runtime": one["groups"]["runtime"],
                    "kernels": dict(sorted(full["kernels"].items())),
                    "support": dict(sorted(full["support"].items())),
                    "linear": linear,
                    "checks": {"full_library": full["file_size"], "one_kernel_library": one["file_size"],
                               "one_kernel": ":".join(small_key[1:]) if small_key[0] == "ai.onnx" else ":".join(small_key)},
                }
                log(f"  {target.name}: full {full['file_size']} B, one kernel {one['file_size']} B")
    finally:
        if tmp:
            tmp.cleanup()
    return doc


def type_reduction(models_dir: Path, platform: str = "linux", abi: str | None = None, work: Path | None = None,
                   fixed_dims=None, input_shapes=None, jobs: int | None = None) -> dict:
    """What type reduction saves for a model set: the same op set built twice, with
    every type signature the registry offers for each op the models use, and with only
    the signatures the models use (what a build compiles). Kernel bytes are the size
    report's attribution of the kernel objects in each linked library."""
    from . import scan
    registry = registry_mod.load()
    models = [scan.scan_model(p, registry, fixed_dims, input_shapes, root=models_dir)
              for p in scan.find_models(models_dir)]
    needs = [n for m in models for n in scan.needs(m, registry)]
    manifest_mod.select(registry, models, needs)
    used = manifest_mod.build(models, needs)
    every = manifest_mod.Manifest(models=used.models, entries=[
        manifest_mod.Entry(e.domain, e.op, e.opset, e.type_constraint, sorted(registry.get(e.domain, e.op).kernels))
        for e in used.entries])
    target = platforms.targets(platform, [abi] if abi else None)[0]
    with tempfile.TemporaryDirectory(prefix="minibuild-types-") as tmp:
        root = Path(work or tmp)
        sizes = {name: _measure(target, registry, m, root / name, jobs) for name, m in (("every", every), ("used", used))}
    e, u = sizes["every"], sizes["used"]
    cut = e["groups"]["kernels"] - u["groups"]["kernels"]
    return {
        "target": target.name,
        "ops": len(used.entries),
        "signatures": {"every": sum(len(x.signatures) for x in every.entries),
                       "used": sum(len(x.signatures) for x in used.entries)},
        "kernel_objects": {"every": e["n_kernels"], "used": u["n_kernels"]},
        "kernel_bytes": {"every": e["groups"]["kernels"], "used": u["groups"]["kernels"]},
        "library_bytes": {"every": e["file_size"], "used": u["file_size"]},
        "kernel_bytes_cut": cut,
        "kernel_cut_percent": round(100.0 * cut / e["groups"]["kernels"], 1) if e["groups"]["kernels"] else 0.0,
        "library_cut_percent": round(100.0 * (e["file_size"] - u["file_size"]) / e["file_size"], 1),
    }

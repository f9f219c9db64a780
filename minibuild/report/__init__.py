"""The report step of the flow: size attribution per op / type / section, written as
JSON + Markdown + HTML, appended to the size history, checked against budgets.

    report.write_reports(opts, build_result)   # the one call pipeline.run_build makes

Modules: binfmt (ELF/Mach-O/ar readers), linkmap (ld.lld maps the link wrote),
attribution (bytes -> owners), marginal (bytes that go with an operator or model),
assemble (the JSON document), markdown / html (writers), history (SQLite), budget,
diff, estimate. The report is a leaf of the flow: it reads what the build left and
imports nothing of build, pipeline or platforms (`minibuild size calibrate`, which
runs builds, is minibuild/calibrate.py; the `size` commands are minibuild/size_cli.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import write_if_changed


@dataclass
class ReportOutcome:
    json: Path
    markdown: Path
    html: Path
    history: Path
    document: dict


def _baseline_summary(b: dict) -> dict:
    return {"source": b.get("source", "baseline"), "generated": b.get("generated"),
            "manifest_hash": b.get("manifest_hash"),
            "artifacts": [{"name": a["name"], "file_size": a["file_size"], "totals": a.get("totals", {})}
                          for a in b.get("artifacts", [])]}


def load_report(path: Path) -> dict:
    from .budget import BudgetSpecError
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BudgetSpecError(f"{path}: cannot read a size report: {e}") from None
    if not isinstance(doc, dict) or "artifacts" not in doc:
        raise BudgetSpecError(f"{path}: not a minibuild size report (no 'artifacts')")
    doc.setdefault("source", str(path))
    return doc


def _short(op: str) -> str:
    return op.removeprefix("ai.onnx.")


def summary_line(a: dict, width: int = 200) -> str:
    """One artifact for the terminal: its size, every group (they add up to it) and
    the operators by marginal bytes, as many whole names as fit in `width`."""
    t = a["totals"]
    head = f"{a['name']}: {a['file_size']} B (" + ", ".join(f"{g} {t[g]}" for g in t if t[g]) + ")"
    ops = [f"{_short(r['op'])} {r['bytes']}" for r in a.get("marginal", {}).get("ops", [])]
    if not ops:
        return head
    line, shown = head + "; marginal per operator: ", 0
    for i, item in enumerate(ops):
        rest = len(ops) - i - 1
        tail = f", +{rest} more" if rest else ""
        if shown and len(line) + 2 + len(item) + len(tail) > width:
            return line + f", +{len(ops) - shown} more"
        line += (", " if shown else "") + item
        shown += 1
    return line


def write_reports(opts, result) -> ReportOutcome:
    """Attribute every built library, write OUT/size_report.{json,md,html}, append the
    history; raise budget.SizeBudgetError (after writing everything) when over budget.

    `result` is the pipeline's BuildResult; only its data is read: the targets
    (build.TargetBuild: library, unstripped twin, link map, object roles), the
    registry's `requires:` per op, the manifest and the per-node needs."""
    from ..console import console
    from . import assemble, attribution, budget as budget_mod, history, html, markdown

    out = Path(opts.out).resolve()
    registry = result.scan.registry
    requires = {f"{e.domain}.{e.op}": list(e.requires) for e in registry.ops.values()}
    model_needs: dict[str, set[tuple[str, str]]] = {m["name"]: set() for m in result.scan.manifest.models}
    for n in result.scan.needs:  # keyed as the kernel objects are: by the object serving the signature
        e = registry.get(n.domain, n.op)
        label = e.kernels[n.signature].label if e and n.signature in e.kernels else n.signature
        model_needs.setdefault(n.model, set()).add((f"{n.domain}.{n.op}", label))
    artifacts = []
    for tb in result.targets:
        att = attribution.attribute_target(tb)
        for w in att.warnings:
            console.print(f"[bold yellow]warning:[/] size report, {tb.target.name}: ", end="", markup=True)
            console.print(w, markup=False, highlight=False)
        artifacts.append(assemble.artifact_doc(tb, att, out, requires, model_needs))
    doc = assemble.build_document(manifest=result.scan.manifest, models_dir=Path(opts.models), out=out, artifacts=artifacts)
    hist_path = history.path_for(out, getattr(opts, "size_history", None))
    if getattr(opts, "size_baseline", None):
        baseline = load_report(Path(opts.size_baseline))
        baseline["source"] = str(opts.size_baseline)
    else:
        baseline = history.last_build(hist_path)
    if baseline:
        doc["baseline"] = _baseline_summary(baseline)
    budget = budget_mod.parse(getattr(opts, "size_budget", None))
    message = None
    if budget:
        results = budget_mod.check(budget, doc)
        exceeded = any(r["exceeded"] for r in results)
        doc["budget"] = {"source": budget.source, "results": results, "exceeded": exceeded}
        if exceeded:
            message = budget_mod.failure_message(results, baseline, doc)
    jpath = write_if_changed(out / "size_report.json", json.dumps(doc, indent=1) + "\n")
    # The Markdown compares with the baseline's full rows when it has them.
    mdoc = dict(doc, baseline=baseline) if baseline else doc
    mpath = write_if_changed(out / "size_report.md", markdown.render(mdoc))
    history.append(hist_path, doc, out)
    hpath = write_if_changed(out / "size_report.html", html.render(doc, history.rows(hist_path, limit=200)))
    for m in doc["models"]:
        for g in m.get("float_groups", []):
            console.print(f"[bold yellow]warning:[/] model {m['name']}, node '{g['node']}': quantised {g['op']} "
                          "stays float: ", end="", markup=True)
            console.print(g["why"], markup=False, highlight=False)
    for a in artifacts:
        console.print(f"[bold]size[/] {summary_line(a, width=max(100, 2 * console.width))}", markup=True, highlight=False)
    console.print(f"  size report -> {mpath.name}, {jpath.name}, {hpath.name}; history {hist_path}")
    outcome = ReportOutcome(jpath, mpath, hpath, hist_path, doc)
    if message:
        err = budget_mod.SizeBudgetError(message)
        err.outcome = outcome
        raise err
    return outcome

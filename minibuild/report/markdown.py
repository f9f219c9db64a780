"""OUT/size_report.md: a table fit for a pull-request comment."""

from __future__ import annotations

from . import diff
from .assemble import GROUPS, package_rows


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if abs(n) >= 1024 else f"{n} B"


def _delta(new: int, old: int | None) -> str:
    if old is None:
        return "new"
    d = new - old
    if d == 0:
        return "±0"
    pct = f" ({100.0 * d / old:+.1f}%)" if old else ""
    return f"{d:+d}{pct}"


def _op(op: str) -> str:
    return op.removeprefix("ai.onnx.")


def render(doc: dict, top: int = 10) -> str:
    base = doc.get("baseline")
    base_sizes = {a["name"]: a["file_size"] for a in base["artifacts"]} if base else {}
    out = ["## minirt size report",
           "",
           f"manifest `{doc['manifest_hash'][:12]}`" + (f" · models commit `{doc['models_commit'][:10]}`" if doc.get("models_commit") else "")
           + f" · {len(doc['models'])} model(s)"
           + (f" · compared with {base['source']} ({base.get('generated', '')})" if base else " · no baseline"),
           "",
           "| artifact | library bytes | change | " + " | ".join(GROUPS) + " | method |",
           "|---|---:|---:|" + "---:|" * len(GROUPS) + "---|"]
    # Every group is a column, so each row's parts add up to its library bytes.
    for a in doc["artifacts"]:
        t = a["totals"]
        out.append(f"| `{a['name']}` | {a['file_size']} | {_delta(a['file_size'], base_sizes.get(a['name']))} | "
                   + " | ".join(str(t.get(g, 0)) for g in GROUPS) + f" | {a['method']} |")
    total_old = sum(base_sizes.values()) if base else None
    out.append(f"| **all libraries** | **{doc['totals']['libraries']}** | {_delta(doc['totals']['libraries'], total_old)} | "
               + " | ".join(str(sum(a["totals"].get(g, 0) for a in doc["artifacts"])) for g in GROUPS) + " | |")
    out.append("")
    if doc["artifacts"]:
        names = [a["name"] for a in doc["artifacts"]]
        out.append("### Top operators: bytes that go if the operator goes (marginal; its own kernels in brackets)")
        out.append("")
        out.append("| operator | types | " + " | ".join(f"`{n}`" for n in names) + " | used by |")
        out.append("|---|---|" + "---:|" * len(names) + "---|")
        for r in doc["operators"][:top]:
            cells = []
            for n in names:
                v = r["artifacts"].get(n, {"bytes": 0, "marginal_bytes": 0})
                cells.append(f"{v.get('marginal_bytes', 0)} ({v['bytes']})")
            users = sorted({u["model"] for u in r["used_by"]})
            nodes = len(r["used_by"])
            out.append(f"| {_op(r['op'])} | {', '.join(r['dtypes'])} | " + " | ".join(cells)
                       + f" | {', '.join(users)} ({nodes} node{'s' if nodes != 1 else ''}) |")
        out.append("")
        shared = [(a["name"], s) for a in doc["artifacts"] for s in a.get("marginal", {}).get("shared_support", [])]
        if shared:
            out.append("### Support units several operators share (they go only when all those operators go)")
            out.append("")
            out.append("| artifact | support unit | unit bytes | shared by | marginal bytes of all of them |")
            out.append("|---|---|---:|---|---:|")
            for name, s in shared:
                out.append(f"| `{name}` | {s['unit']} | {s['bytes']} | {', '.join(_op(o) for o in s['ops'])} | "
                           f"{s['marginal_bytes_of_ops']} |")
            out.append("")
        models = {m["name"] for m in doc.get("models", [])}
        if models:
            out.append("### Models: bytes that go if the model goes (kernels no other model needs)")
            out.append("")
            out.append("| model | " + " | ".join(f"`{n}`" for n in names) + " | operators only it needs |")
            out.append("|---|" + "---:|" * len(names) + "---|")
            for m in sorted(models):
                rows = [next((x for x in a.get("marginal", {}).get("models", []) if x["model"] == m), None)
                        for a in doc["artifacts"]]
                only = sorted({_op(o) for x in rows if x for o in x["ops_removed"]})
                out.append(f"| {m} | " + " | ".join(str(x["bytes"]) if x else "0" for x in rows)
                           + f" | {', '.join(only) or '-'} |")
            out.append("")
    islands = [(m["name"], g) for m in doc.get("models", []) for g in m.get("float_groups", [])]
    if islands:
        out.append("### Quantised groups left in float (their DequantizeLinear/QuantizeLinear stay)")
        out.append("")
        out.append("| model | node | operator | why |")
        out.append("|---|---|---|---|")
        for model, g in islands:
            out.append(f"| {model} | `{g['node']}` | {g['op']} | {g['why']} |")
        out.append("")
    if base:
        rows = diff.compare(base, doc)
        changed = [r for r in rows if r.what in ("op", "component") and r.delta]
        changed.sort(key=lambda r: (-abs(r.delta), r.artifact, r.name))
        out.append("### Change against the baseline")
        out.append("")
        if changed:
            out.append("| +/- bytes | % | artifact | name |")
            out.append("|---:|---:|---|---|")
            for r in changed[:15]:
                pct = "new" if r.old == 0 else ("gone" if r.new == 0 else f"{r.pct:+.1f}%")
                out.append(f"| {r.delta:+d} | {pct} | `{r.artifact}` | {r.name} |")
        else:
            out.append("No operator or component changed size.")
        out.append("")
    if doc.get("budget"):
        b = doc["budget"]
        out.append(f"### Budget ({b['source']}): {'**EXCEEDED**' if b['exceeded'] else 'within budget'}")
        out.append("")
        out.append("| scope | bytes | budget | headroom |")
        out.append("|---|---:|---:|---:|")
        for r in b["results"]:
            out.append(f"| {r['scope']} | {r['actual']} | {r['limit']} | {r['limit'] - r['actual']:+d}"
                       + (" ❌" if r["exceeded"] else "") + " |")
        out.append("")
    packages = package_rows(doc.get("platform_sizes", {}))
    if packages:
        out.append("### Packages")
        out.append("")
        out.append("| platform | package or library | bytes | deflated |")
        out.append("|---|---|---:|---:|")
        for plat, item, n, z in packages:
            out.append(f"| {plat} | `{item}` | {n} | {'' if z is None else z} |")
        out.append("")
    if doc.get("dist"):
        out.append("<details><summary>Packaged files (OUT/dist)</summary>")
        out.append("")
        out.append("| file | bytes |")
        out.append("|---|---:|")
        for f in doc["dist"]:
            out.append(f"| `{f['path']}` | {f['bytes']} |")
        out.append("")
        out.append("</details>")
        out.append("")
    notes = [f"`{a['name']}`: {n}" for a in doc["artifacts"] for n in a.get("notes", [])]
    if notes:
        out.append("Notes: " + "; ".join(notes))
        out.append("")
    out.append("<sub>Every library's bytes are split into the parts above and add up to its stripped file size; "
               "see size_report.html for charts and size_report.json for the per-symbol detail.</sub>")
    return "\n".join(out) + "\n"

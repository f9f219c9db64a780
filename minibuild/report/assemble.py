"""Turn attributions into the size-report document (docs/size_report.md, schema in
docs/size_report.schema.json)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from .. import __version__
from . import attribution, marginal as marginal_mod

SCHEMA_ID = "minibuild.size_report/1"
GROUPS = ("runtime", "kernels", "support", "glue", "external", "shared", "overhead", "unattributed")
_GROUP_OF_KIND = {"runtime": "runtime", "kernel": "kernels", "support": "support", "registry": "glue",
                  "bindings": "glue", "other": "glue", "external": "external", "shared": "shared"}


def models_commit(models: Path) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(models), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = p.stdout.strip()
    return out if p.returncode == 0 and len(out) >= 7 else None


def _rel(path: Path, out: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), out)
    except ValueError:
        return str(path)


def artifact_doc(tb, att: attribution.Attribution, out: Path, requires: dict[str, list[str]],
                 model_needs: dict[str, set[tuple[str, str]]] | None = None) -> dict:
    """model_needs: model -> the (domain.op, dtype) kernels it asks for (for marginal bytes per model)."""
    L = att.ledger
    comps = sorted(L.components.values(), key=lambda c: (-c.bytes, c.id))
    totals = dict.fromkeys(GROUPS, 0)
    for c in comps:
        totals[_GROUP_OF_KIND.get(c.kind, "glue")] += c.bytes
    totals["overhead"] = sum(L.overhead.values())
    totals["unattributed"] = sum(L.unattributed.values())
    by_op: dict[str, dict] = {}
    by_dtype: dict[str, int] = defaultdict(int)
    support_bytes = {c.name.split("/", 1)[1]: c.bytes for c in comps if c.kind == "support"}
    for c in comps:
        if c.kind != "kernel":
            continue
        e = by_op.setdefault(c.op, {"op": c.op, "bytes": 0, "dtypes": {}, "support": [], "support_bytes": 0})
        e["bytes"] += c.bytes
        e["dtypes"][c.dtype] = e["dtypes"].get(c.dtype, 0) + c.bytes
        by_dtype[c.dtype] += c.bytes
    marginal = marginal_mod.document(att, requires, model_needs or {})
    marginal_of = {r["op"]: r["bytes"] for r in marginal["ops"]}
    for op, e in by_op.items():
        e["support"] = sorted(requires.get(op, []))
        e["support_bytes"] = sum(support_bytes.get(s, 0) for s in e["support"])
        e["marginal_bytes"] = marginal_of.get(op, e["bytes"])
    overhead = [{"name": k, "category": attribution.overhead_category(k), "bytes": v}
                for k, v in sorted(L.overhead.items(), key=lambda kv: (-kv[1], kv[0]))]
    sections = []
    for s in att.sections:
        owners = L.section_owners.get(s["name"], {})
        sections.append({**s, "owners": {k: v for k, v in sorted(owners.items(), key=lambda kv: (-kv[1], kv[0]))}})
    total = sum(totals.values())
    return {
        "name": tb.target.name,
        "platform": tb.target.platform,
        "abi": tb.target.abi,
        "triple": tb.target.triple,
        "library": _rel(tb.library, out),
        "symbols_from": _rel(tb.unstripped, out) if tb.unstripped else None,
        "format": att.format,
        "method": att.method,
        "file_size": att.file_size,
        "totals": totals,
        "components": [
            {"id": c.id, "kind": c.kind, "name": c.name, "op": c.op, "dtype": c.dtype, "bytes": c.bytes,
             "sections": dict(sorted(c.sections.items())), "objects": c.objects,
             "top_items": [{"name": k, "bytes": v} for k, v in sorted(c.items.items(), key=lambda kv: (-kv[1], kv[0]))[:12]],
             **({"archive_member_bytes": c.member_bytes} if c.member_bytes else {})}
            for c in comps
        ],
        "by_op": sorted(by_op.values(), key=lambda e: (-e["bytes"], e["op"])),
        "by_dtype": dict(sorted(by_dtype.items(), key=lambda kv: (-kv[1], kv[0]))),
        "marginal": marginal,
        "overhead": overhead,
        "unattributed": [{"section": k, "bytes": v} for k, v in sorted(L.unattributed.items())],
        "sections": sections,
        "notes": L.notes,
        "check": {"sum": total, "file_size": att.file_size, "ok": total == att.file_size},
    }


def dist_files(out: Path) -> list[dict]:
    d = out / "dist"
    if not d.is_dir():
        return []
    return [{"path": str(p.relative_to(out)), "bytes": p.stat().st_size}
            for p in sorted(d.rglob("*")) if p.is_file()]


def platform_sizes(out: Path) -> dict:
    got = {}
    for name in ("android", "ios", "python"):
        p = out / "dist" / f"{name}-sizes.json"
        if p.is_file():
            try:
                got[name] = json.loads(p.read_text())
            except ValueError as e:
                got[name] = {"error": f"{p.name} is not valid JSON: {e}"}
    return got


def package_rows(platform_sizes: dict) -> list[tuple[str, str, int, int | None]]:
    """(platform, item, bytes, deflated bytes or None) for the packages the platforms
    wrote (their <platform>-sizes.json): each AAR and each Android .so raw and as
    deflated inside the AAR, the XCFramework and its libraries, each wheel and its
    library."""
    rows = []
    for plat, data in sorted(platform_sizes.items()):
        if not isinstance(data, dict) or "error" in data:
            continue
        if plat == "android":
            for key in ("aar", "prefab_aar"):
                if isinstance(data.get(key), dict):
                    rows.append((plat, data[key]["path"], data[key]["bytes"], None))
            for abi, s in sorted(data.get("abis", {}).items()):
                rows.append((plat, f"{abi}/libminirt.so", s["so_bytes"], s.get("so_deflated_bytes")))
        else:
            rows += [(plat, name, n, None) for name, n in sorted(data.items()) if isinstance(n, int)]
    return rows


def operators(manifest, artifacts: list[dict]) -> list[dict]:
    """Each manifest operator: its bytes per artifact and the models/nodes that need it."""
    rows = []
    for e in manifest.entries:
        op = f"{e.domain}.{e.op}"
        per = {}
        for a in artifacts:
            hit = next((x for x in a["by_op"] if x["op"] == op), None)
            per[a["name"]] = {"bytes": hit["bytes"] if hit else 0, "dtypes": hit["dtypes"] if hit else {},
                              "support_bytes": hit["support_bytes"] if hit else 0,
                              "marginal_bytes": hit["marginal_bytes"] if hit else 0}
        rows.append({"op": op, "opset": e.opset, "dtypes": list(e.dtypes),
                     "used_by": [{"model": m, "node": n} for m, n in e.used_by], "artifacts": per})
    rows.sort(key=lambda r: (-max([v["marginal_bytes"] for v in r["artifacts"].values()] or [0]), r["op"]))
    return rows


# The QDQ lowering logs each group it leaves in float as "QDQ group around <Op> <node>
# stays float (...): <why>"; the report lists them so nobody ships a float island in an
# int8 model without being told.
_FLOAT_GROUP = re.compile(r"^QDQ group around (\S+) (.+?) stays float \([^)]*\): (.*)$")


def float_groups(rewrites: list[str]) -> list[dict]:
    """The quantised groups of one model that stay float, with the reason."""
    rows = []
    for r in rewrites:
        m = _FLOAT_GROUP.match(r)
        if m:
            rows.append({"op": m.group(1), "node": m.group(2), "why": m.group(3)})
    return rows


def build_document(*, manifest, models_dir: Path, out: Path, artifacts: list[dict], generated: str | None = None) -> dict:
    generated = generated or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    return {
        "schema": SCHEMA_ID,
        "generated": generated,
        "minibuild_version": __version__,
        "manifest_hash": manifest.hash,
        "models_commit": models_commit(models_dir),
        "models": [{"name": m["name"], "file": m["file"], "sha256": m["sha256"],
                    "float_groups": float_groups(m.get("rewrites", []))} for m in manifest.models],
        "artifacts": artifacts,
        "totals": {"libraries": sum(a["file_size"] for a in artifacts),
                   "per_artifact": {a["name"]: a["file_size"] for a in artifacts}},
        "operators": operators(manifest, artifacts),
        "dist": dist_files(out),
        "platform_sizes": platform_sizes(out),
        "baseline": None,
        "budget": None,
    }

"""Size budgets: `--size-budget BYTES` (all libraries together) or `--size-budget FILE`
(YAML, see docs/size_report.md):

    total: 150000              # all libraries of the build
    artifacts:                 # per platform-ABI library
      linux-x86_64: 60000
      android-arm64-v8a: 52000
    platforms:                 # every ABI of a platform together
      android: 200000
    dist:                      # files under OUT/ (packaged artifacts), by path
      dist/minirt-release.aar: 400000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import MinibuildError
from . import diff


class SizeBudgetError(MinibuildError):
    """A size budget was exceeded; the build's artifacts and reports are written."""

    exit_code = 3


class BudgetSpecError(MinibuildError):
    exit_code = 2


@dataclass
class Budget:
    total: int | None = None
    artifacts: dict | None = None
    platforms: dict | None = None
    dist: dict | None = None
    source: str = ""


def _int(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BudgetSpecError(f"size budget {where}: expected a byte count (integer >= 0), got {v!r}")
    return v


def parse(spec: str | int | Path | None) -> Budget | None:
    if spec is None or spec == "":
        return None
    s = str(spec).strip()
    if s.isdigit():
        return Budget(total=int(s), source=f"--size-budget {s}")
    p = Path(s)
    if not p.is_file():
        raise BudgetSpecError(f"--size-budget {s}: neither a byte count nor a YAML file that exists")
    try:
        d = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise BudgetSpecError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(d, dict) or set(d) - {"total", "artifacts", "platforms", "dist"}:
        raise BudgetSpecError(f"{p}: expected a mapping with keys total, artifacts, platforms, dist "
                              f"(got {sorted(d) if isinstance(d, dict) else type(d).__name__})")
    b = Budget(source=str(p))
    if "total" in d:
        b.total = _int(d["total"], f"{p}: total")
    for key in ("artifacts", "platforms", "dist"):
        if key in d:
            if not isinstance(d[key], dict):
                raise BudgetSpecError(f"{p}: {key} must map names to byte counts")
            setattr(b, key, {str(k): _int(v, f"{p}: {key}.{k}") for k, v in d[key].items()})
    return b


def check(budget: Budget, doc: dict) -> list[dict]:
    """Every limit with its actual size; `exceeded` marks the failures."""
    arts = doc["artifacts"]
    results = []

    def add(scope, limit, actual):
        results.append({"scope": scope, "limit": limit, "actual": actual, "exceeded": actual > limit})

    if budget.total is not None:
        add("all libraries", budget.total, sum(a["file_size"] for a in arts))
    for name, limit in (budget.artifacts or {}).items():
        hit = [a["file_size"] for a in arts if a["name"] == name]
        if hit:
            add(name, limit, hit[0])
    for plat, limit in (budget.platforms or {}).items():
        hit = [a["file_size"] for a in arts if a["platform"] == plat]
        if hit:
            add(f"platform {plat}", limit, sum(hit))
    files = {f["path"]: f["bytes"] for f in doc.get("dist", [])}
    for path, limit in (budget.dist or {}).items():
        if path in files:
            add(path, limit, files[path])
    return results


def failure_message(results: list[dict], baseline: dict | None, doc: dict) -> str:
    bad = [r for r in results if r["exceeded"]]
    lines = ["size budget exceeded (the build succeeded; its artifacts and size reports are written):"]
    for r in bad:
        lines.append(f"  - {r['scope']}: {r['actual']} bytes > budget {r['limit']} (+{r['actual'] - r['limit']})")
    if baseline:
        grow = diff.growers(diff.compare(baseline, doc), 5)
        if grow:
            lines.append(f"biggest growers against the last build ({baseline.get('source', 'baseline')}):")
            for g in grow:
                lines.append(f"  {g.delta:+d} bytes  {g.artifact}  {g.name}")
        else:
            lines.append(f"nothing grew against the last build ({baseline.get('source', 'baseline')}); "
                         "the budget is below the current size")
    else:
        lines.append("no earlier build in the size history to compare with; the largest operators now:")
        tops = sorted(((c["bytes"], a["name"], c["name"]) for a in doc["artifacts"] for c in a["components"]
                       if c["kind"] == "kernel"), reverse=True)[:5]
        for b, art, name in tops:
            lines.append(f"  {b} bytes  {art}  {name}")
    lines.append("raise the budget (--size-budget) or drop models/operators; see OUT/size_report.md")
    return "\n".join(lines)

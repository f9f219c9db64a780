"""Growth between two size reports, bloaty-diff style: +/- bytes, %, name, sorted by
absolute change. Works on full reports and on the smaller baseline the history
gives (totals, per-group and per-kernel bytes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Row:
    artifact: str
    what: str       # total | group | op | component | section
    name: str
    old: int
    new: int

    @property
    def delta(self) -> int:
        return self.new - self.old

    @property
    def pct(self) -> float | None:
        return None if self.old == 0 else 100.0 * self.delta / self.old


def _components(a: dict) -> dict[str, tuple[str, int]]:
    out = {}
    for c in a.get("components", []):
        key = f"op|{c['op']}|{c['dtype']}" if c.get("kind") == "kernel" else "c|" + c.get("id", c["name"])
        out[key] = (c["name"], c["bytes"])
    return out


def compare(old: dict, new: dict) -> list[Row]:
    rows: list[Row] = []
    olds = {a["name"]: a for a in old.get("artifacts", [])}
    news = {a["name"]: a for a in new.get("artifacts", [])}
    for name in sorted(set(olds) | set(news)):
        o, n = olds.get(name, {}), news.get(name, {})
        rows.append(Row(name, "total", "TOTAL", o.get("file_size", 0), n.get("file_size", 0)))
        for g in sorted(set(o.get("totals", {})) | set(n.get("totals", {}))):
            rows.append(Row(name, "group", g, o.get("totals", {}).get(g, 0), n.get("totals", {}).get(g, 0)))
        oc, nc = _components(o), _components(n)
        only_kernels = not any(c.get("kind") != "kernel" for c in o.get("components", [])) or \
            not any(c.get("kind") != "kernel" for c in n.get("components", []))
        for key in sorted(set(oc) | set(nc)):
            if only_kernels and not key.startswith("op|"):
                continue  # the history keeps kernels only: compare like with like
            label = (nc.get(key) or oc.get(key))[0]
            rows.append(Row(name, "op" if key.startswith("op|") else "component", label,
                            oc.get(key, ("", 0))[1], nc.get(key, ("", 0))[1]))
        os_ = {s["name"]: s["file_size"] for s in o.get("sections", [])}
        ns_ = {s["name"]: s["file_size"] for s in n.get("sections", [])}
        if os_ and ns_:
            for s in sorted(set(os_) | set(ns_)):
                rows.append(Row(name, "section", s, os_.get(s, 0), ns_.get(s, 0)))
    return rows


def growers(rows: list[Row], n: int = 5) -> list[Row]:
    """The biggest growers among operators and components (not totals)."""
    cand = [r for r in rows if r.what in ("op", "component") and r.delta > 0]
    return sorted(cand, key=lambda r: (-r.delta, r.artifact, r.name))[:n]


def _fmt_pct(r: Row) -> str:
    if r.pct is None:
        return "new" if r.new else ""
    if r.new == 0:
        return "gone"
    return f"{r.pct:+.1f}%"


def format_diff(rows: list[Row], show_zero: bool = False) -> str:
    lines = []
    for art in sorted({r.artifact for r in rows}):
        mine = [r for r in rows if r.artifact == art]
        total = next(r for r in mine if r.what == "total")
        lines.append(f"{art}: {total.old} -> {total.new} bytes ({total.delta:+d}, {_fmt_pct(total)})")
        lines.append(f"  {'+/- bytes':>10}  {'%':>8}  name")
        body = [r for r in mine if r.what != "total" and (show_zero or r.delta)]
        body.sort(key=lambda r: (-abs(r.delta), r.what, r.name))
        for r in body:
            tag = {"op": "[op] ", "component": "", "section": "[section] ", "group": "[group] "}[r.what]
            lines.append(f"  {r.delta:>+10d}  {_fmt_pct(r):>8}  {tag}{r.name}")
        if not body:
            lines.append("  (no change)")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"

"""OUT/size_report.html: one self-contained page (inline SVG and CSS, no network,
no script) with charts of bytes per group and ABI, per operator and type, per
element type, and the trend over the builds in the size history."""

from __future__ import annotations

from html import escape

from .assemble import package_rows

COLORS = {"runtime": "#4e79a7", "kernels": "#f28e2b", "support": "#e15759", "glue": "#76b7b2",
          "external": "#59a14f", "shared": "#edc948", "overhead": "#b07aa1", "unattributed": "#9c755f"}
SERIES = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666} table{border-collapse:collapse;margin:8px 0} td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums} .chart{margin:8px 0} .legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px} code{font-size:12px}
.bad{color:#b00020;font-weight:bold} .ok{color:#1b7f3a} svg text{font:12px system-ui,sans-serif}
details{margin:6px 0}
"""


def _fmt(n: int) -> str:
    return f"{n:,}"


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{escape(n)}</span>' for n, c in items) + "</div>"


def stacked_bars(rows: list[tuple[str, dict]], order: list[str], colors: dict, width: int = 900, label_w: int = 170) -> str:
    """One horizontal bar per row, split into the `order` parts."""
    bar_h, gap = 22, 10
    h = len(rows) * (bar_h + gap) + 10
    scale_max = max([sum(v.values()) for _, v in rows] or [1]) or 1
    avail = width - label_w - 90
    parts = [f'<svg class="chart" role="img" width="{width}" height="{h}" viewBox="0 0 {width} {h}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, vals) in enumerate(rows):
        y = 5 + i * (bar_h + gap)
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{escape(name)}</text>')
        x = float(label_w)
        for key in order:
            v = vals.get(key, 0)
            if v <= 0:
                continue
            w = max(0.5, avail * v / scale_max)
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colors[key]}">'
                         f'<title>{escape(name)} · {escape(key)}: {_fmt(v)} bytes</title></rect>')
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{_fmt(sum(vals.values()))} B</text>')
    parts.append("</svg>")
    return "".join(parts)


def series_colors(names: list[str], more: list[str] = ()) -> dict[str, str]:
    """One colour per artifact (platform-ABI) for every chart of the page: the report's
    artifacts in their order, then any the history adds."""
    colors: dict[str, str] = {}
    for n in [*names, *sorted(set(more) - set(names))]:
        colors.setdefault(n, SERIES[len(colors) % len(SERIES)])
    return colors


def grouped_bars(categories: list[str], series: list[str], value, width: int = 900, label_w: int = 200,
                 colors: dict[str, str] | None = None) -> str:
    """Horizontal bars: per category one thin bar per series (artifact)."""
    colors = colors or series_colors(series)
    bh = 12 if len(series) > 1 else 16
    group_h = bh * len(series) + 8
    h = len(categories) * group_h + 10
    vmax = max([value(c, s) for c in categories for s in series] or [1]) or 1
    avail = width - label_w - 80
    parts = [f'<svg class="chart" role="img" width="{width}" height="{h}" viewBox="0 0 {width} {h}" xmlns="http://www.w3.org/2000/svg">']
    for i, cat in enumerate(categories):
        y0 = 5 + i * group_h
        parts.append(f'<text x="{label_w - 8}" y="{y0 + group_h / 2 + 1:.0f}" text-anchor="end">{escape(cat)}</text>')
        for j, s in enumerate(series):
            v = value(cat, s)
            y = y0 + j * bh
            w = max(0.5, avail * v / vmax) if v else 0
            if w:
                parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bh - 2}" fill="{colors[s]}">'
                             f'<title>{escape(cat)} · {escape(s)}: {_fmt(v)} bytes</title></rect>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bh - 3}" font-size="10">{_fmt(v)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def trend_chart(history: list[dict], width: int = 900, height: int = 260, colors: dict[str, str] | None = None) -> str:
    """File size per artifact over the builds in the history (x: build order)."""
    builds = sorted({r["build"] for r in history})
    arts = sorted({r["artifact"] for r in history})
    colors = colors or series_colors([], arts)
    if not builds:
        return '<p class="meta">No history yet.</p>'
    pad_l, pad_r, pad_t, pad_b = 70, 170, 12, 34
    xs = {b: pad_l + (i * (width - pad_l - pad_r) / max(1, len(builds) - 1) if len(builds) > 1 else (width - pad_l - pad_r) / 2)
          for i, b in enumerate(builds)}
    vals = [r["file_size"] for r in history]
    lo, hi = min(vals), max(vals)
    if hi == lo:
        lo, hi = max(0, lo - 1024), hi + 1024
    span = hi - lo
    lo, hi = max(0, lo - span * 0.1), hi + span * 0.1

    def y(v):
        return pad_t + (height - pad_t - pad_b) * (1 - (v - lo) / (hi - lo))

    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#999"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#999"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        parts.append(f'<text x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10">{_fmt(int(v))}</text>'
                     f'<line x1="{pad_l}" y1="{y(v):.1f}" x2="{width - pad_r}" y2="{y(v):.1f}" stroke="#eee"/>')
    times = {r["build"]: r["time"] for r in history}
    step = max(1, len(builds) // 8)
    for i, b in enumerate(builds):
        if i % step == 0 or i == len(builds) - 1:
            parts.append(f'<text x="{xs[b]:.1f}" y="{height - pad_b + 14}" text-anchor="middle" font-size="10">#{b}</text>')
    for j, art in enumerate(arts):
        color = colors[art]
        pts = [(xs[r["build"]], y(r["file_size"]), r) for r in history if r["artifact"] == art]
        if len(pts) > 1:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                         + " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in pts) + '"/>')
        for px, py, r in pts:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"><title>{escape(art)} build #{r["build"]} '
                         f'({escape(times[r["build"]])}, manifest {escape(r["manifest_hash"][:12])}): {_fmt(r["file_size"])} bytes</title></circle>')
        if pts:
            parts.append(f'<text x="{width - pad_r + 8}" y="{pts[-1][1] + 4:.1f}" fill="{color}">{escape(art)}</text>')
    parts.append(f'<text x="{(width - pad_r + pad_l) / 2:.0f}" y="{height - 4}" text-anchor="middle" font-size="10">build (oldest → newest)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(head: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    h = "".join(f'<th class="{"n" if i in numeric else ""}">{escape(x)}</th>' for i, x in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"n" if i in numeric else ""}">{c if isinstance(c, Markup) else escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


class Markup(str):
    pass


def render(doc: dict, history: list[dict]) -> str:
    arts = doc["artifacts"]
    names = [a["name"] for a in arts]
    colors = series_colors(names, [r["artifact"] for r in history])
    groups = ["runtime", "kernels", "support", "glue", "external", "shared", "overhead", "unattributed"]
    used_groups = [g for g in groups if any(a["totals"].get(g) for a in arts)]
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
           f"<title>minirt size report · {escape(doc['manifest_hash'][:12])}</title><style>{CSS}</style></head><body>",
           "<h1>minirt size report</h1>",
           f"<p class=\"meta\">generated {escape(doc['generated'])} · minibuild {escape(doc['minibuild_version'])} · manifest "
           f"<code>{escape(doc['manifest_hash'][:16])}</code>"
           + (f" · models commit <code>{escape(doc['models_commit'][:12])}</code>" if doc.get("models_commit") else "")
           + f" · models: {escape(', '.join(m['name'] for m in doc['models']) or '-')}</p>"]
    b = doc.get("budget")
    if b:
        cls = "bad" if b["exceeded"] else "ok"
        out.append(f'<p class="{cls}">Budget ({escape(b["source"])}): {"EXCEEDED" if b["exceeded"] else "within budget"}</p>')
    out.append('<h2 id="per-abi">Library bytes per artifact and ABI</h2>')
    out.append(_legend([(g, COLORS[g]) for g in used_groups]))
    out.append(stacked_bars([(a["name"], a["totals"]) for a in arts], used_groups, COLORS))
    out.append(_table(["artifact", "format", "bytes", *used_groups, "method"],
                      [[a["name"], a["format"], _fmt(a["file_size"]), *[_fmt(a["totals"][g]) for g in used_groups], a["method"]]
                       for a in arts], numeric=set(range(2, 3 + len(used_groups)))))
    kernel_rows = {}
    for a in arts:
        for c in a["components"]:
            if c["kind"] == "kernel":
                kernel_rows.setdefault(c["name"], {})[a["name"]] = c["bytes"]
    cats = sorted(kernel_rows, key=lambda k: (-max(kernel_rows[k].values()), k))[:30]
    marginal = {}
    for a in arts:
        for r in a.get("marginal", {}).get("ops", []):
            marginal.setdefault(r["op"].removeprefix("ai.onnx."), {})[a["name"]] = r["bytes"]
    out.append('<h2 id="marginal">Bytes that go if an operator goes (marginal)</h2>')
    out.append('<p class="meta">Its kernels, the support units no other operator needs, the routines only it '
               'reaches, its registry rows and imports (docs/size_report.md).</p>')
    out.append(_legend([(n, colors[n]) for n in names]))
    mcats = sorted(marginal, key=lambda k: (-max(marginal[k].values()), k))[:30]
    out.append(grouped_bars(mcats, names, lambda c, s: marginal.get(c, {}).get(s, 0), colors=colors)
               if mcats else "<p>No kernels.</p>")
    shared = [[a["name"], sh["unit"], _fmt(sh["bytes"]), ", ".join(o.removeprefix("ai.onnx.") for o in sh["ops"]),
               _fmt(sh["marginal_bytes_of_ops"])] for a in arts for sh in a.get("marginal", {}).get("shared_support", [])]
    if shared:
        out.append("<h3>Support units several operators share</h3>")
        out.append(_table(["artifact", "support unit", "unit bytes", "shared by", "marginal bytes of all of them"],
                          shared, numeric={2, 4}))
    mrows = []
    for m in doc.get("models", []):
        per = [next((x for x in a.get("marginal", {}).get("models", []) if x["model"] == m["name"]), None) for a in arts]
        only = sorted({o.removeprefix("ai.onnx.") for x in per if x for o in x["ops_removed"]})
        mrows.append([m["name"], *[_fmt(x["bytes"]) if x else "0" for x in per], ", ".join(only) or "-"])
    if mrows:
        out.append("<h3>Bytes that go if a model goes</h3>")
        out.append(_table(["model", *names, "operators only it needs"], mrows, numeric=set(range(1, 1 + len(names)))))
    out.append('<h2 id="per-op">Own bytes per operator and element type</h2>')
    out.append(_legend([(n, colors[n]) for n in names]))
    out.append(grouped_bars(cats, names, lambda c, s: kernel_rows.get(c, {}).get(s, 0), colors=colors)
               if cats else "<p>No kernels.</p>")
    sup = {}
    for a in arts:
        for c in a["components"]:
            if c["kind"] in ("support", "runtime", "registry", "bindings"):
                sup.setdefault(c["name"], {})[a["name"]] = c["bytes"]
    if sup:
        out.append("<h3>Runtime core, support units and glue</h3>")
        scats = sorted(sup, key=lambda k: (-max(sup[k].values()), k))
        out.append(grouped_bars(scats, names, lambda c, s: sup.get(c, {}).get(s, 0), colors=colors))
    dts = sorted({d for a in arts for d in a["by_dtype"]})
    out.append('<h2 id="per-type">Kernel bytes per element type</h2>')
    out.append(grouped_bars(dts, names, lambda d, s: next((a["by_dtype"].get(d, 0) for a in arts if a["name"] == s), 0),
                            colors=colors) if dts else "<p>No kernels.</p>")
    out.append('<h2 id="trend">Trend over past builds</h2>')
    out.append(f'<p class="meta">{len({r["build"] for r in history})} build(s) in the size history.</p>')
    out.append(trend_chart(history, colors=colors))
    out.append('<h2 id="operators">Operators and the models that need them</h2>')
    rows = []
    for r in doc["operators"]:
        users = "; ".join(f"{u['model']}/{u['node']}" for u in r["used_by"][:8]) + (" …" if len(r["used_by"]) > 8 else "")
        rows.append([r["op"].removeprefix("ai.onnx."), ", ".join(r["dtypes"]),
                     *[f'{_fmt(r["artifacts"].get(n, {}).get("marginal_bytes", 0))} '
                       f'({_fmt(r["artifacts"].get(n, {}).get("bytes", 0))})' for n in names], users])
    out.append(_table(["operator", "types", *[f"{n}: marginal (own)" for n in names], "used by (model/node)"], rows,
                      numeric=set(range(2, 2 + len(names)))))
    for a in arts:
        out.append(f'<h2 id="detail-{escape(a["name"])}">{escape(a["name"])}: sections and overhead</h2>')
        out.append(f'<p class="meta"><code>{escape(a["library"])}</code> · {_fmt(a["file_size"])} bytes · attributed by '
                   f'{escape(a["method"])} · parts sum to {_fmt(a["check"]["sum"])}'
                   + (" ✓" if a["check"]["ok"] else " ✗") + "</p>")
        out.append(_table(["section", "kind", "file bytes", "largest owners"],
                          [[s["name"], s["kind"], _fmt(s["file_size"]),
                            ", ".join(f"{k} {_fmt(v)}" for k, v in list(s["owners"].items())[:4])] for s in a["sections"]],
                          numeric={2}))
        out.append("<details><summary>Overhead, named</summary>")
        out.append(_table(["name", "category", "bytes"], [[o["name"], o["category"], _fmt(o["bytes"])] for o in a["overhead"]], {2}))
        out.append("</details>")
        if a["unattributed"]:
            out.append(_table(["unattributed in section", "bytes"], [[u["section"], _fmt(u["bytes"])] for u in a["unattributed"]], {1}))
        out.append("<details><summary>Components</summary>")
        out.append(_table(["component", "kind", "bytes", "largest symbols"],
                          [[c["name"], c["kind"], _fmt(c["bytes"]), ", ".join(f"{i['name']} {i['bytes']}" for i in c["top_items"][:4])]
                           for c in a["components"]], {2}))
        out.append("</details>")
    if doc.get("dist") or doc.get("platform_sizes"):
        out.append('<h2 id="dist">Packaged artifacts</h2>')
        if doc.get("dist"):
            out.append(_table(["file", "bytes"], [[f["path"], _fmt(f["bytes"])] for f in doc["dist"]], {1}))
        packages = package_rows(doc.get("platform_sizes", {}))
        if packages:
            out.append(_table(["platform", "package or library", "bytes", "deflated"],
                              [[plat, item, _fmt(n), "" if z is None else _fmt(z)] for plat, item, n, z in packages],
                              {2, 3}))
    out.append("</body></html>")
    return "\n".join(out) + "\n"

"""`minibuild query`: questions a release engineer asks of a build, answered from the
manifest's provenance and the size report.

    minibuild query why OP [--type T] --models DIR      every model and node that needs OP, and
                                                        the rewrite that made each (fused ops name
                                                        the nodes they replaced)
    minibuild query deps MODEL --models DIR [--out OUT] the kernels MODEL needs, with their bytes
                                                        when OUT holds a build's size report
    minibuild query kernels --out OUT [--platform P]    the objects a build compiled, with bytes
    minibuild query rdeps NAME --models DIR             reverse dependencies: the kernels a support
                                                        unit (gemm, obj/support/gemm.o) feeds and the
                                                        models behind them, or the models and nodes
                                                        a kernel (Conv, kernels/Conv__float32.o) serves

Each takes --output text (default), json, or dot (graphviz: `| dot -Tsvg > why.svg`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import MinibuildError


@dataclass
class Use:
    model: str
    node: str
    op: str                 # domain.op
    opset: int
    types: str              # "float32" / "T=float32, Tind=int64"
    made_by: list = field(default_factory=list)   # [{"node": "Op name", "rewrite": "..."}]
    absorbed: bool = False  # OP itself is not a kernel of the build: this node does its work


def _op_matches(query: str, domain: str, op: str) -> bool:
    return query in (op, f"{domain}.{op}")


def why(scan, op: str, dtype: str | None = None) -> list[Use]:
    """Every node of the optimised models that asks for `op` (name or domain.op),
    optionally only those whose signature has element type `dtype`."""
    out = []
    for n in scan.needs:
        if not _op_matches(op, n.domain, n.op):
            continue
        if dtype and dtype not in n.types:
            continue
        out.append(Use(n.model, n.node, f"{n.domain}.{n.op}", n.opset, n.types_label.split(" ", 1)[1],
                       [{"node": orig, "rewrite": rewrite} for rewrite, orig in n.origins]))
    if not out:  # folded or fused away: name the nodes that now do its work
        for n in scan.needs:
            if any(orig.split(" ", 1)[0] == op.rsplit(".", 1)[-1] for _, orig in n.origins):
                out.append(Use(n.model, n.node, f"{n.domain}.{n.op}", n.opset, n.types_label.split(" ", 1)[1],
                               [{"node": orig, "rewrite": rewrite} for rewrite, orig in n.origins], absorbed=True))
    if not out:
        known = sorted({f"{n.domain}.{n.op}" for n in scan.needs})
        what = f"{op}" + (f" with type {dtype}" if dtype else "")
        raise MinibuildError(f"no node of these models needs {what}; the ops they need: {', '.join(known)}")
    return out


def _report(out: Path | None) -> dict | None:
    if out is None:
        return None
    path = Path(out) / "size_report.json"
    if not path.is_file():
        raise MinibuildError(f"{path}: no size report; build first (minibuild --models DIR --out {out}) "
                             "or leave --out out for kernels without bytes")
    return json.loads(path.read_text())


def deps(scan, model: str, report: dict | None = None) -> list[dict]:
    """The kernels (op, opset, signature) one model needs, each with the nodes that ask
    for it, and per artifact the kernel's own bytes and its marginal bytes."""
    names = sorted(m.name for m in scan.models)
    if model not in names:
        raise MinibuildError(f"no model '{model}' in this folder; models: {', '.join(names)}")
    rows = {}
    for n in scan.needs:
        if n.model != model:
            continue
        key = (f"{n.domain}.{n.op}", n.opset, n.signature)
        rows.setdefault(key, []).append(n.node)
    sizes = {}
    for a in (report or {}).get("artifacts", []):
        marginal = {m["op"]: m["bytes"] for m in a.get("marginal", {}).get("ops", [])}
        for o in a.get("by_op", []):
            sizes.setdefault(o["op"], {})[a["name"]] = {"bytes": o["bytes"], "dtypes": o.get("dtypes", {}),
                                                        "marginal_bytes": marginal.get(o["op"], o.get("marginal_bytes"))}
    out = []
    for (op, opset, sig), nodes in sorted(rows.items()):
        row = {"op": op, "opset": opset, "signature": sig, "nodes": nodes}
        if report is not None:
            row["artifacts"] = {name: {"bytes": s["dtypes"].get(sig, s["bytes"]), "marginal_bytes": s["marginal_bytes"]}
                                for name, s in sizes.get(op, {}).items()}
        out.append(row)
    return out


def kernels(report: dict, platform: str | None = None) -> list[dict]:
    """The objects each artifact of a build links, with what they hold and their bytes."""
    out = []
    for a in report.get("artifacts", []):
        if platform and a.get("platform") != platform:
            continue
        for c in a.get("components", []):
            out.append({"artifact": a["name"], "object": c["id"], "kind": c["kind"], "name": c["name"],
                        "op": c.get("op"), "dtype": c.get("dtype"), "bytes": c["bytes"]})
    if not out:
        have = sorted({a.get("platform") for a in report.get("artifacts", [])})
        raise MinibuildError(f"this build has no artifact for platform {platform}; it has: {', '.join(have)}")
    return out


def _object_name(name: str) -> str:
    """'obj/support/gemm.o', 'support/gemm.o', 'kernels/Conv__float32.o' -> the part after
    the folder, without '.o' ('gemm', 'Conv__float32')."""
    n = name.rsplit("/", 1)[-1]
    return n[:-2] if n.endswith(".o") else n


def rdeps(scan, name: str) -> dict:
    """Who depends on `name`: a support unit (its name or object path) -> every kernel
    object of these models that requires it, with the models and nodes each serves; a
    kernel (op, domain.op or its object path) -> the models and nodes it serves."""
    from . import domains
    reg = scan.registry
    kernels = {}   # object stem -> {"op", "label", "requires", "uses": [(model, node)]}
    for n in scan.needs:
        e = reg.get(n.domain, n.op)
        k = e.kernels.get(n.signature) if e is not None else None
        if k is None:
            continue
        stem = f"{domains.qualified(n.domain, n.op)}__{k.suffix}"
        row = kernels.setdefault(stem, {"object": f"obj/kernels/{stem}.o", "op": f"{n.domain}.{n.op}",
                                        "label": k.label, "requires": list(e.requires), "uses": []})
        row["uses"].append({"model": n.model, "node": n.node})
    stem = _object_name(name)
    is_support_path = "support/" in name
    if stem in reg.support and (is_support_path or not any(_op_matches(name, *r["op"].rsplit(".", 1))
                                                            for r in kernels.values())):
        fed = [dict(r, models=sorted({u["model"] for u in r["uses"]})) for s, r in sorted(kernels.items())
               if stem in r["requires"]]
        return {"kind": "support", "name": stem, "object": f"obj/support/{stem}.o", "kernels": fed,
                "models": sorted({m for r in fed for m in r["models"]})}
    served = [r for s, r in sorted(kernels.items())
              if s == stem or _op_matches(name, *r["op"].rsplit(".", 1))]
    if not served:
        raise MinibuildError(f"nothing of these models depends on {name!r}: it is no support unit they use "
                             f"({', '.join(sorted({s for r in kernels.values() for s in r['requires']})) or 'none'}) "
                             f"and no kernel they use ({', '.join(sorted(kernels))})")
    return {"kind": "kernel", "name": name, "kernels": [dict(r, models=sorted({u["model"] for u in r["uses"]}))
                                                          for r in served],
            "models": sorted({u["model"] for r in served for u in r["uses"]})}


def rdeps_text(res: dict) -> str:
    if res["kind"] == "support":
        lines = [f"support unit {res['name']} ({res['object']}) feeds {len(res['kernels'])} kernel object(s) "
                 f"of {len(res['models'])} model(s)"]
    else:
        lines = [f"{res['name']}: {len(res['kernels'])} kernel object(s) serving {len(res['models'])} model(s)"]
    for k in res["kernels"]:
        lines.append(f"  {k['object']}  {k['op']} {k['label']}")
        for m in k["models"]:
            nodes = [u["node"] for u in k["uses"] if u["model"] == m]
            lines.append(f"    model {m}: {len(nodes)} node(s) ({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''})")
    return "\n".join(lines) + "\n"


def rdeps_dot(res: dict) -> str:
    lines = ["digraph rdeps {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    for k in res["kernels"]:
        if res["kind"] == "support":
            lines.append(f"  {_dot_quote(res['object'])} -> {_dot_quote(k['object'])};")
        for m in k["models"]:
            lines.append(f"  {_dot_quote(k['object'])} -> {_dot_quote('model ' + m)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- output -------------------------------------------------------------------------

def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def why_text(uses: list[Use]) -> str:
    lines = []
    if uses and uses[0].absorbed:
        lines.append("not a kernel of this build: build-time rewrites moved its work into these nodes")
    for u in uses:
        lines.append(f"{u.op} opset {u.opset} ({u.types}): model {u.model}, node {u.node}")
        for m in u.made_by:
            lines.append(f"    from {m['node']} ({m['rewrite']})")
    return "\n".join(lines) + "\n"


def why_dot(uses: list[Use]) -> str:
    lines = ["digraph why {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    for u in uses:
        op = _dot_quote(f"{u.op} ({u.types})")
        node = _dot_quote(f"{u.model}: {u.node}")
        lines.append(f"  {node} -> {op};")
        for m in u.made_by:
            orig = _dot_quote(f"{u.model}: {m['node']}")
            lines.append(f"  {orig} -> {node} [label={_dot_quote(m['rewrite'])}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def deps_text(model: str, rows: list[dict]) -> str:
    lines = [f"{model}: {len(rows)} kernel(s)"]
    for r in rows:
        size = ""
        if "artifacts" in r:
            size = "  " + ", ".join(f"{a}: {s['bytes']} B (marginal {s['marginal_bytes']} B)"
                                    for a, s in sorted(r["artifacts"].items()))
        lines.append(f"  {r['op']} opset {r['opset']} {r['signature']}  [{len(r['nodes'])} node(s)]{size}")
    return "\n".join(lines) + "\n"


def deps_dot(model: str, rows: list[dict]) -> str:
    lines = ["digraph deps {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    for r in rows:
        label = f"{r['op']} {r['signature']}"
        if r.get("artifacts"):
            label += "\\n" + ", ".join(f"{a}: {s['bytes']} B" for a, s in sorted(r["artifacts"].items()))
        lines.append(f"  {_dot_quote(model)} -> {_dot_quote(label)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def kernels_text(rows: list[dict]) -> str:
    return "".join(f"{r['artifact']:20} {r['bytes']:>8}  {r['kind']:8} {r['name']}\n" for r in rows)


def kernels_dot(rows: list[dict]) -> str:
    lines = ["digraph kernels {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    for r in rows:
        obj = _dot_quote(f"{r['name']} ({r['bytes']} B)")
        lines.append(f"  {_dot_quote(r['artifact'])} -> {obj};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- command line -------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibuild query", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(q, models=True):
        if models:
            q.add_argument("--models", type=Path, required=True, help="folder of .onnx models")
            q.add_argument("--fix-dim", action="append", metavar="NAME=N")
            q.add_argument("--input-shape", action="append", metavar="INPUT=D0,D1,...")
        q.add_argument("--output", choices=("text", "json", "dot"), default="text")

    w = sub.add_parser("why", help="which models and nodes need an operator, and the rewrites that made them")
    w.add_argument("op", help="operator name, or domain.op (ai.minibuild.FusedConv)")
    w.add_argument("--type", dest="dtype", help="only uses whose type signature has this element type")
    common(w)
    d = sub.add_parser("deps", help="the kernels a model needs, with their bytes")
    d.add_argument("model", help="the model's name (its file name without .onnx)")
    d.add_argument("--out", type=Path, help="a build's output folder: add bytes from its size report")
    common(d)
    k = sub.add_parser("kernels", help="the objects a build compiled, with their bytes")
    k.add_argument("--out", type=Path, default=Path("minibuild-out"), help="the build's output folder")
    k.add_argument("--platform", help="only this platform's artifacts")
    common(k, models=False)
    r = sub.add_parser("rdeps", help="what depends on a support unit or kernel: kernels, models, nodes")
    r.add_argument("name", help="a support unit (gemm, obj/support/gemm.o) or a kernel (Conv, ai.onnx.Conv, "
                   "obj/kernels/Conv__float32.o)")
    common(r)
    return p


def _scan(args):
    import tempfile
    from .options import Options, parse_fix_dims, parse_input_shapes
    from .pipeline import run_scan
    with tempfile.TemporaryDirectory(prefix="minibuild-query-") as tmp:
        opts = Options(models=args.models, out=Path(tmp), fixed_dims=parse_fix_dims(args.fix_dim),
                       input_shapes=parse_input_shapes(args.input_shape))
        return run_scan(opts, select=False)


def main(argv) -> int:
    from .console import print_error
    args = parser().parse_args(argv)
    try:
        if args.cmd == "why":
            uses = why(_scan(args), args.op, args.dtype)
            text = {"text": why_text, "dot": why_dot,
                    "json": lambda u: json.dumps([asdict(x) for x in u], indent=1) + "\n"}[args.output](uses)
        elif args.cmd == "deps":
            rows = deps(_scan(args), args.model, _report(args.out))
            text = {"text": lambda r: deps_text(args.model, r), "dot": lambda r: deps_dot(args.model, r),
                    "json": lambda r: json.dumps(r, indent=1) + "\n"}[args.output](rows)
        elif args.cmd == "rdeps":
            res = rdeps(_scan(args), args.name)
            text = {"text": rdeps_text, "dot": rdeps_dot,
                    "json": lambda r: json.dumps(r, indent=1) + "\n"}[args.output](res)
        else:
            rows = kernels(_report(args.out), args.platform)
            text = {"text": kernels_text, "dot": kernels_dot,
                    "json": lambda r: json.dumps(r, indent=1) + "\n"}[args.output](rows)
    except (MinibuildError, ValueError) as e:
        print_error(str(e))
        return getattr(e, "exit_code", 2)
    print(text, end="")
    return 0

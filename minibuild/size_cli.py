"""`minibuild size ...`: the size report's own commands. They live above the report
package: `estimate` scans models and `calibrate` runs builds (minibuild/calibrate.py),
while report/ only reads what builds left behind.

    minibuild size history [--size-history PATH] [--limit N] [--json]
    minibuild size diff OLD.json NEW.json [--all]
    minibuild size estimate --models DIR [--platform P] [--abi A] [--table FILE] [--json]
    minibuild size calibrate [--platform P] [--abi A] [--table FILE] [--work DIR]
    minibuild size types --models DIR [--platform P] [--abi A] [--json]   what type reduction saves
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .errors import MinibuildError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibuild size", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("history", help="print the size history")
    h.add_argument("--size-history", type=Path, help="SQLite file (default $MINIBUILD_SIZE_HISTORY or --out's)")
    h.add_argument("--out", type=Path, default=Path("minibuild-out"), help="build output folder (default: minibuild-out)")
    h.add_argument("--limit", type=int, help="only the last N builds")
    h.add_argument("--json", action="store_true", help="print JSON rows")
    d = sub.add_parser("diff", help="per-operator and per-section growth between two size_report.json")
    d.add_argument("old", type=Path)
    d.add_argument("new", type=Path)
    d.add_argument("--all", action="store_true", help="also list rows that did not change")
    e = sub.add_parser("estimate", help="predict library sizes from measured kernel sizes, without compiling")
    e.add_argument("--models", type=Path, required=True)
    e.add_argument("--platform", default="linux")
    e.add_argument("--abi", action="append")
    e.add_argument("--table", type=Path, help="kernel size table (default: minibuild/data/kernel_sizes.json)")
    e.add_argument("--fix-dim", action="append", metavar="NAME=N")
    e.add_argument("--input-shape", action="append", metavar="INPUT=D0,D1,...")
    e.add_argument("--json", action="store_true")
    t = sub.add_parser("types", help="build the models' op set with every type the registry offers and with the "
                       "types they use, and report the bytes type reduction cuts")
    t.add_argument("--models", type=Path, required=True)
    t.add_argument("--platform", default="linux")
    t.add_argument("--abi")
    t.add_argument("--fix-dim", action="append", metavar="NAME=N")
    t.add_argument("--input-shape", action="append", metavar="INPUT=D0,D1,...")
    t.add_argument("--json", action="store_true")
    c = sub.add_parser("calibrate", help="build every registry kernel per target and measure it (updates the table)")
    c.add_argument("--platform", default="linux")
    c.add_argument("--abi", action="append")
    c.add_argument("--table", type=Path, help="table to update (default: minibuild/data/kernel_sizes.json)")
    c.add_argument("--work", type=Path, help="keep the calibration builds here (default: a temporary folder)")
    c.add_argument("-j", "--jobs", type=int)
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .console import console
    try:
        return _run(args)
    except MinibuildError as e:
        console.print("[bold red]error:[/] ", end="")
        console.print(str(e), markup=False)
        return e.exit_code
    except (ValueError, OSError) as e:
        console.print("[bold red]error:[/] ", end="")
        console.print(str(e), markup=False)
        return 2


def _run(args) -> int:
    from .report import diff, estimate, history, load_report
    if args.cmd == "history":
        path = history.path_for(args.out, args.size_history)
        if not path.is_file():
            print(f"no size history at {path}", file=sys.stderr)
            return 1
        rows = history.rows(path, args.limit)
        print(json.dumps(rows, indent=1) if args.json else history.format_rows(rows))
        return 0
    if args.cmd == "diff":
        old, new = load_report(args.old), load_report(args.new)
        sys.stdout.write(diff.format_diff(diff.compare(old, new), show_zero=args.all))
        return 0
    if args.cmd == "estimate":
        from .options import Options, parse_fix_dims, parse_input_shapes
        from .pipeline import run_scan
        from . import platforms
        table = estimate.load_table(args.table)
        with tempfile.TemporaryDirectory(prefix="minibuild-estimate-") as tmp:
            opts = Options(models=args.models, out=Path(tmp), fixed_dims=parse_fix_dims(args.fix_dim),
                           input_shapes=parse_input_shapes(args.input_shape))
            scan = run_scan(opts)
        results = []
        for name in platforms.expand([args.platform]):
            for t in platforms.targets(name, args.abi):
                results.append(estimate.estimate(scan.manifest, scan.registry, t.name, table))
        if args.json:
            print(json.dumps(results, indent=1))
            return 0 if all("error" not in r for r in results) else 1
        print(f"{'target':24} {'estimated bytes':>15}  {'runtime':>8} {'kernels':>8} {'support':>8} {'glue':>6} {'overhead':>8}  notes")
        for r in results:
            if "error" in r:
                print(f"{r['target']:24} {'?':>15}  {r['error']}")
                continue
            p = r["parts"]
            note = f"no measurement for {', '.join(r['unknown'])}" if r["unknown"] else ""
            print(f"{r['target']:24} {r['bytes']:>15}  {p['runtime']:>8} {p['kernels']:>8} {p['support']:>8} "
                  f"{p.get('glue', 0):>6} {p.get('overhead', 0):>8}  {note}")
        return 0 if all("error" not in r for r in results) else 1
    if args.cmd == "types":
        from .calibrate import type_reduction
        from .options import parse_fix_dims, parse_input_shapes
        r = type_reduction(args.models, args.platform, args.abi, fixed_dims=parse_fix_dims(args.fix_dim),
                           input_shapes=parse_input_shapes(args.input_shape))
        if args.json:
            print(json.dumps(r, indent=1))
        else:
            print(f"{r['target']}: {r['ops']} ops; {r['signatures']['used']} of {r['signatures']['every']} type "
                  f"signatures used, {r['kernel_objects']['used']} of {r['kernel_objects']['every']} kernel objects")
            print(f"  kernel bytes: {r['kernel_bytes']['every']} with every type -> {r['kernel_bytes']['used']} "
                  f"(-{r['kernel_bytes_cut']} B, -{r['kernel_cut_percent']} %)")
            print(f"  library:      {r['library_bytes']['every']} -> {r['library_bytes']['used']} B "
                  f"(-{r['library_cut_percent']} %)")
        return 0
    if args.cmd == "calibrate":
        from .calibrate import calibrate
        doc = calibrate([args.platform], args.abi, args.work, args.table, args.jobs, log=print)
        path = estimate.write_table(doc, args.table)
        print(f"kernel size table -> {path}")
        return 0
    return 2

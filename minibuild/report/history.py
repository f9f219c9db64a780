"""The size history: one SQLite file a CI fleet can share (`--size-history PATH`,
`MINIBUILD_SIZE_HISTORY`). One row per (build, artifact), the per-op bytes beside it.
Times live here and in the report files, never in the libraries."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

ENV = "MINIBUILD_SIZE_HISTORY"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS builds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    models_commit TEXT,
    out_dir TEXT,
    minibuild_version TEXT
);
CREATE TABLE IF NOT EXISTS artifacts (
    build_id INTEGER NOT NULL REFERENCES builds(id),
    name TEXT NOT NULL,            -- platform-abi, e.g. linux-x86_64
    platform TEXT NOT NULL,
    abi TEXT NOT NULL,
    file_size INTEGER NOT NULL,
    totals TEXT NOT NULL,          -- JSON: bytes per group (runtime, kernels, ...)
    PRIMARY KEY (build_id, name)
);
CREATE TABLE IF NOT EXISTS ops (
    build_id INTEGER NOT NULL REFERENCES builds(id),
    artifact TEXT NOT NULL,
    op TEXT NOT NULL,
    dtype TEXT NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_name ON artifacts(name, build_id);
"""


def path_for(out: Path, option: Path | str | None) -> Path:
    if option:
        return Path(option)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(out) / "size_history.sqlite"


def connect(path: Path) -> sqlite3.Connection:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), timeout=30)
    con.executescript(_SCHEMA)
    return con


def append(path: Path, doc: dict, out_dir: Path | None = None) -> int:
    con = connect(path)
    with con:
        cur = con.execute("INSERT INTO builds(time, manifest_hash, models_commit, out_dir, minibuild_version) "
                          "VALUES (?,?,?,?,?)", (doc["generated"], doc["manifest_hash"], doc.get("models_commit"),
                                                 str(out_dir) if out_dir else None, doc.get("minibuild_version")))
        bid = cur.lastrowid
        for a in doc["artifacts"]:
            con.execute("INSERT INTO artifacts VALUES (?,?,?,?,?,?)",
                        (bid, a["name"], a["platform"], a["abi"], a["file_size"], json.dumps(a["totals"], sort_keys=True)))
            for c in a["components"]:
                if c["kind"] == "kernel":
                    con.execute("INSERT INTO ops VALUES (?,?,?,?,?)", (bid, a["name"], c["op"], c["dtype"], c["bytes"]))
    con.close()
    return bid


def rows(path: Path, limit: int | None = None) -> list[dict]:
    """Every (build, artifact) row, oldest first."""
    if not Path(path).is_file():
        return []
    con = connect(path)
    q = ("SELECT b.id, b.time, b.manifest_hash, b.models_commit, a.name, a.platform, a.abi, a.file_size, a.totals "
         "FROM builds b JOIN artifacts a ON a.build_id = b.id ORDER BY b.id, a.name")
    out = [{"build": r[0], "time": r[1], "manifest_hash": r[2], "models_commit": r[3], "artifact": r[4],
            "platform": r[5], "abi": r[6], "file_size": r[7], "totals": json.loads(r[8])} for r in con.execute(q)]
    con.close()
    if limit:
        keep = sorted({r["build"] for r in out})[-limit:]
        out = [r for r in out if r["build"] in set(keep)]
    return out


def last_build(path: Path) -> dict | None:
    """The newest build in the history, shaped like a (small) size report for comparisons."""
    if not Path(path).is_file():
        return None
    con = connect(path)
    r = con.execute("SELECT id, time, manifest_hash, models_commit FROM builds ORDER BY id DESC LIMIT 1").fetchone()
    if r is None:
        con.close()
        return None
    bid = r[0]
    arts = []
    for name, platform, abi, size, totals in con.execute(
            "SELECT name, platform, abi, file_size, totals FROM artifacts WHERE build_id=? ORDER BY name", (bid,)):
        comps = [{"kind": "kernel", "op": op, "dtype": dt, "bytes": b, "name": f"{op.removeprefix('ai.onnx.')} {dt}"}
                 for op, dt, b in con.execute("SELECT op, dtype, bytes FROM ops WHERE build_id=? AND artifact=?", (bid, name))]
        arts.append({"name": name, "platform": platform, "abi": abi, "file_size": size,
                     "totals": json.loads(totals), "components": comps, "sections": []})
    con.close()
    return {"source": f"history build {bid}", "generated": r[1], "manifest_hash": r[2], "models_commit": r[3],
            "artifacts": arts}


def format_rows(rs: list[dict]) -> str:
    if not rs:
        return "(no builds recorded)"
    head = f"{'build':>5}  {'time':25}  {'manifest':12}  {'commit':10}  {'artifact':24}  {'bytes':>10}  {'Δ prev':>8}"
    lines = [head, "-" * len(head)]
    prev: dict[str, int] = {}
    for r in rs:
        d = r["file_size"] - prev[r["artifact"]] if r["artifact"] in prev else None
        prev[r["artifact"]] = r["file_size"]
        lines.append(f"{r['build']:>5}  {r['time']:25}  {r['manifest_hash'][:12]:12}  {(r['models_commit'] or '-')[:10]:10}  "
                     f"{r['artifact']:24}  {r['file_size']:>10}  {('' if d is None else f'{d:+d}'):>8}")
    return "\n".join(lines)

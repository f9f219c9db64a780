"""Build times and cache hits of `minibuild --platform android` for MobileNetV2 plus a
second model (tests/models.py small_classifier), each phase a fresh process:

    python bench/bench_build.py [--work bench-out/build] [-j 2] [--json F]

    cold         empty local cache, empty remote cache (a Bazel HTTP cache: nginx with
                 WebDAV on 127.0.0.1, started here as the tests start it); fills both
    remote-warm  clean output folder, empty local cache, the warm remote cache
    local-warm   clean output folder, the warm local cache, no remote
    no-op        the cold build's command again, nothing changed (the no-op stamp)
    one-model    the second model retrained (other weights, same operators), rebuilt
                 into the cold build's folder

Prints per phase the wall time of the whole process, the summary line's counts
(actions run, from the local cache, from the remote cache, executed, up to date), the
load average (2 shared cores: a busy machine slows every phase alike), and the
number of blobs and bytes in the remote cache after the cold build; checks that the
warm builds' dist/ is byte-identical to the cold build's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import onnx  # noqa: E402

import models  # noqa: E402
import servers  # noqa: E402

SUMMARY = re.compile(r"(\d+) action\(s\) run \((\d+) from the local cache, (\d+) from the remote cache, "
                     r"(\d+) executed\)(?:, (\d+) up to date)?")


def start_nginx(root: Path):
    """The tests' WebDAV nginx (tests/servers.py), one open location."""
    if servers.NGINX is None:
        raise SystemExit("nginx is not installed (Debian: apt-get install nginx)")
    try:
        proc, url, _ = servers.start_webdav_nginx(root, {"open": None})
    except RuntimeError as e:
        raise SystemExit(str(e)) from None
    return proc, f"{url}/open"


def run(models_dir: Path, out: Path, cache: Path, jobs: int, remote: str | None = None) -> dict:
    cmd = [sys.executable, "-m", "minibuild", "--models", str(models_dir), "--platform", "android",
           "--out", str(out), "-j", str(jobs)] + (["--remote-cache", remote] if remote else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBUILD_")}
    env.update(MINIBUILD_CACHE=str(cache), COLUMNS="200")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{text[-3000:]}")
    m = SUMMARY.search(" ".join(text.split()))
    counts = dict(zip(("run", "local", "remote", "executed", "up_to_date"),
                      (int(g) if g is not None else None for g in m.groups()))) if m else {}
    return {"wall_s": round(wall, 3), "load": round(os.getloadavg()[0], 2), **counts,
            "noop_stamp": "up to date: nothing changed" in text}


def dist(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "dist").rglob("*")) if p.is_file()}


def blobs(www: Path) -> dict:
    out = {}
    for kind in ("ac", "cas"):
        files = [p for p in (www / kind).rglob("*") if p.is_file()] if (www / kind).exists() else []
        out[kind] = {"blobs": len(files), "bytes": sum(p.stat().st_size for p in files)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=HERE.parent / "bench-out" / "build")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--noop-runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    m = work / "models"
    m.mkdir()
    onnx.save(models.mobilenet_v2(), str(m / "mobilenet_v2.onnx"))
    onnx.save(models.small_classifier(), str(m / "small_classifier.onnx"))
    nginx, url = start_nginx(work / "nginx")
    results = {}
    try:
        results["cold"] = run(m, work / "out-cold", work / "cache-cold", args.jobs, url)
        results["remote_after_cold"] = blobs(work / "nginx" / "www" / "open")
        results["remote-warm"] = run(m, work / "out-remote", work / "cache-empty", args.jobs, url)
        results["local-warm"] = run(m, work / "out-local", work / "cache-cold", args.jobs)
        cold = dist(work / "out-cold")
        results["identical_dist"] = dist(work / "out-remote") == cold and dist(work / "out-local") == cold
        noops = [run(m, work / "out-cold", work / "cache-cold", args.jobs, url) for _ in range(args.noop_runs)]
        results["no-op"] = dict(noops[-1], wall_s=round(statistics.median(n["wall_s"] for n in noops), 3),
                                wall_s_all=[n["wall_s"] for n in noops])
        onnx.save(models.small_classifier(seed=7), str(m / "small_classifier.onnx"))
        results["one-model"] = run(m, work / "out-cold", work / "cache-cold", args.jobs, url)
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
    print(f"{'phase':12} {'wall s':>8} {'run':>5} {'local':>6} {'remote':>7} {'exec':>5} {'uptodate':>9} {'load':>5}")
    for phase in ("cold", "remote-warm", "local-warm", "no-op", "one-model"):
        r = results[phase]
        print(f"{phase:12} {r['wall_s']:8.2f} {r.get('run', 0) or 0:5} {r.get('local', 0) or 0:6} "
              f"{r.get('remote', 0) or 0:7} {r.get('executed', 0) or 0:5} {r.get('up_to_date', 0) or 0:9} "
              f"{r['load']:5.2f}{'  (stamp)' if r['noop_stamp'] else ''}")
    rc = results["remote_after_cold"]
    print(f"remote cache after the cold build: {rc['ac']['blobs']} action results ({rc['ac']['bytes']} B), "
          f"{rc['cas']['blobs']} blobs ({rc['cas']['bytes']} B)")
    print(f"dist/ (AARs, models) of the remote-warm and local-warm builds byte-identical to the cold build's: "
          f"{results['identical_dist']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The no-op stamp: a second `minibuild` with nothing changed ends before it imports
onnx, scans a model or starts SCons.

After a build succeeds, the command line writes a stamp beside the build's state
(OUT/build/noop-<key>.json, or the workspace's OUT/.build/): the key is the hash of
the command's options and of the environment variables a build reads; the stamp
holds, for every file the build reads, its size, mtime and sha256, the file list of
every folder it reads (so a new model or kernel source is seen), and the size and
mtime of every file the build wrote. The next run with the same key compares: a file
whose stat is unchanged is taken as unchanged; one whose stat changed is hashed, and
only a changed hash (or a new, missing or changed output) makes the build run.

What a build reads: the model folders (every file: external data too), the size
budget / baseline files, the workspace file, minibuild's own sources and build
inputs (SConstruct, site_scons, ops_registry, templates, kernels_src, packaging),
the Python packages installed (their folders' mtimes change on any install or
upgrade: onnx, SCons, ziglang's zig), and the JDK that `javac` resolves to.

A skipped build appends nothing to the size history. A leaf: imports nothing of
minibuild beyond its own package path, so the check costs a few milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache"}
# Written by every build, or by this module: never part of the output check.
_VOLATILE = ("size_history.sqlite", ".sconsign", "noop-", "actions.jsonl", ".lock")
_ENV_PREFIXES = ("MINIBUILD_", "ZIG_")
_ENV_NAMES = ("JAVA_HOME", "PATH", "SOURCE_DATE_EPOCH")


def _file_hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(root: str):
    """Every file under `root`, sorted, without caches and compiled Python."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out += [os.path.join(dirpath, f) for f in filenames if not f.endswith((".pyc", ".pyo"))]
    return sorted(out)


def _stat(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _tool_inputs() -> tuple[list[str], list[str]]:
    """(folders, single files) that every build reads, whatever the models."""
    pkg = Path(__file__).resolve().parent
    from . import resources
    root = resources.root()
    trees = [str(pkg)] + [str(root / a) for a in resources.ASSETS if (root / a).is_dir()]
    files = [str(root / a) for a in resources.ASSETS if (root / a).is_file()]
    return trees, files


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({paths[k] for k in ("purelib", "platlib") if paths.get(k)})


def _environment_marks() -> list:
    """What an install, an upgrade or another JDK changes: the mtime of each
    site-packages folder (pip adds and renames dist-info folders in it), the Python
    executable, and the JDK `javac` on PATH or JAVA_HOME resolves to."""
    marks = [sys.version, sys.executable, _stat(os.path.realpath(sys.executable))]
    marks += [[d, _stat(d)] for d in _site_dirs()]
    javac = None
    if os.environ.get("JAVA_HOME"):
        javac = os.path.join(os.environ["JAVA_HOME"], "bin", "javac")
    else:
        for d in os.environ.get("PATH", "").split(os.pathsep):
            if d and os.path.isfile(os.path.join(d, "javac")):
                javac = os.path.join(d, "javac")
                break
    if javac:
        real = os.path.realpath(javac)
        marks.append([real, _stat(real)])
    return marks


class Stamp:
    """One command's stamp. `key_parts`: what names the build (its options, JSON-able);
    `inputs`: files and folders it reads besides minibuild's own; `outputs`: the
    folders it writes; `state`: where the stamp lives."""

    def __init__(self, key_parts, inputs: list[Path], outputs: list[Path], state: Path):
        env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES)
        from . import __version__
        blob = json.dumps([__version__, key_parts, env, os.getcwd()], sort_keys=True, default=str).encode()
        self.key = hashlib.sha256(blob).hexdigest()
        self.path = Path(state) / f"noop-{self.key[:20]}.json"
        trees, files = _tool_inputs()
        for p in inputs:
            p = os.path.abspath(p)
            (trees if os.path.isdir(p) else files).append(p)
        self.trees, self.files = sorted(set(trees)), sorted(set(files))
        self.outputs = sorted({os.path.abspath(p) for p in outputs})

    # -- what is there now
    def _input_listing(self) -> tuple[dict, dict]:
        listing = {t: _walk(t) for t in self.trees}
        files = sorted({f for fs in listing.values() for f in fs} | set(self.files))
        return {t: [os.path.relpath(f, t) for f in fs] for t, fs in listing.items()}, files

    def _output_stats(self) -> dict:
        out = {}
        for root in self.outputs:
            for f in _walk(root):
                if not any(v in os.path.basename(f) for v in _VOLATILE):
                    out[f] = _stat(f)
        return out

    def snapshot(self) -> dict:
        """The inputs as they are now (call it before the build starts, so an edit made
        while it runs is seen by the next one)."""
        listing, files = self._input_listing()
        inputs = {}
        for f in files:
            st = _stat(f)
            inputs[f] = None if st is None else st + [_file_hash(f)]
        return {"key": self.key, "trees": listing, "inputs": inputs, "env": _environment_marks()}

    def write(self, snap: dict) -> None:
        doc = dict(snap, outputs=self._output_stats())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.part")
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, self.path)

    def invalidate(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass

    def up_to_date(self) -> str | None:
        """None when the build can be skipped, else why it cannot (for --verbose)."""
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return "no stamp"
        if doc.get("key") != self.key:
            return "options changed"
        if doc.get("env") != json.loads(json.dumps(_environment_marks())):
            return "Python, its packages or the JDK changed"
        listing, files = self._input_listing()
        if doc.get("trees") != listing:
            was = {os.path.join(t, f) for t, fs in doc.get("trees", {}).items() for f in fs}
            now = {os.path.join(t, f) for t, fs in listing.items() for f in fs}
            diff = sorted(was ^ now) or sorted(set(doc.get("trees", {})) ^ set(listing))
            return f"a file was added or removed: {diff[0] if diff else '?'}"
        old = doc.get("inputs", {})
        if sorted(old) != files:
            return "the input files changed"
        for f in files:
            was, st = old[f], _stat(f)
            if was is None or st is None:
                if was != st:
                    return f"{f} appeared or vanished"
                continue
            if st != was[:2] and _file_hash(f) != was[2]:
                return f"{f} changed"
        if doc.get("outputs") != json.loads(json.dumps(self._output_stats())):
            return "an output was changed or removed"
        return None

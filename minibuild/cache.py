"""The action cache: results of build actions, keyed by the hash of everything the
action reads, shared by every build folder and checkout on a machine.

Layout under MINIBUILD_CACHE (default ~/.cache/minibuild), as Bazel's disk cache lays
out its own:

    ac/<aa>/<sha256 of the action key>    an action result: JSON {"outputs": [{"name", "sha256", "size"}]}
    cas/<aa>/<sha256 of the bytes>        the bytes of one output

Every blob is checked against its hash when read: an entry that does not match (a
disk error, a partial copy, a poisoned cache) is deleted and the action runs again.
Writes go to a temporary name and are renamed, so an interrupted build never leaves a
half-written entry. A leaf: imports nothing of minibuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def default_root() -> Path:
    return Path(os.environ.get("MINIBUILD_CACHE") or Path.home() / ".cache" / "minibuild")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def action_key(*parts) -> str:
    """The hash of an action's description: strings and bytes, in order, length-prefixed
    so that no two different lists of parts give the same key."""
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class LocalCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or default_root())

    def _path(self, kind: str, digest: str) -> Path:
        return self.root / kind / digest[:2] / digest

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise

    def put_blob(self, data: bytes) -> str:
        digest = sha256(data)
        path = self._path("cas", digest)
        if not path.is_file():
            self._write(path, data)
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        path = self._path("cas", digest)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if sha256(data) != digest:  # corrupt or poisoned: never used
            path.unlink(missing_ok=True)
            return None
        return data

    def put(self, key: str, outputs: dict[str, bytes]) -> None:
        """Store an action's outputs (name -> bytes) under its key."""
        entry = {"outputs": [{"name": name, "sha256": self.put_blob(data), "size": len(data)}
                             for name, data in sorted(outputs.items())]}
        self._write(self._path("ac", key), json.dumps(entry, sort_keys=True).encode())

    def get(self, key: str) -> dict[str, bytes] | None:
        """The outputs stored under `key`, every blob verified; None on any miss."""
        path = self._path("ac", key)
        try:
            entry = json.loads(path.read_text())
            outputs = {}
            for o in entry["outputs"]:
                data = self.get_blob(o["sha256"])
                if data is None or len(data) != o["size"]:
                    return None
                outputs[o["name"]] = data
            return outputs
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def stats(self) -> dict:
        out = {"root": str(self.root)}
        for kind in ("ac", "cas"):
            files = [p for p in (self.root / kind).rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
            out[kind] = {"entries": len(files), "bytes": sum(p.stat().st_size for p in files)}
        return out

    def gc(self, max_bytes: int) -> dict:
        """Delete the least recently used entries until the cache holds at most
        `max_bytes` (action results first, so no result points at a deleted blob)."""
        files = [p for kind in ("ac", "cas") for p in (self.root / kind).rglob("*") if p.is_file()]
        total = sum(p.stat().st_size for p in files)
        removed = 0
        for p in sorted(files, key=lambda p: (p.stat().st_atime, p.parts[-3] != "ac")):
            if total <= max_bytes:
                break
            size = p.stat().st_size
            p.unlink(missing_ok=True)
            total -= size
            removed += 1
        return {"removed": removed, "bytes": total}

"""The build's Python-side actions (codegen, convert, javac, package archives) as
cached actions, in the same local and remote caches as SCons' compiles and links.

    with actions.running(prof, remote_env):
        data = actions.cached("convert", "mobilenet_v2.mrt", [key parts...], lambda: {"out": bytes})["out"]

An action's key is the hash of its kind, the digest of minibuild's own Python sources
(any change to the code that makes the outputs misses), and the caller's parts (input
bytes or their digests, options, tool versions). A hit is read from the local cache,
else the remote one (copied into the local one); both verify every blob by its hash.
A miss runs `make` and stores its outputs. Each action is recorded (name, start, end,
cache result) for the end-of-build summary and a `--profile` span. Outside `running`
(a caller that builds one thing alone), `cached` just runs `make`.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from . import cache as cache_mod

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("minibuild_actions", default=None)
_CODE: list[str] = []
_REGISTRY: list[str] = []


def code_digest() -> str:
    """sha256 over minibuild's Python sources (names and bytes), computed once."""
    if not _CODE:
        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parent
        for p in sorted(pkg.rglob("*.py")):
            h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes())
        _CODE.append(h.hexdigest())
    return _CODE[0]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_digest(paths, root) -> str:
    """One digest over files: their paths relative to `root` (so two checkouts agree)
    and their bytes."""
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).relative_to(root).as_posix().encode() + b"\0" + Path(p).read_bytes())
    return h.hexdigest()


def registry_digest() -> str:
    """sha256 over ops_registry/ (names and bytes), computed once."""
    if not _REGISTRY:
        from . import resources
        root = resources.path("ops_registry")
        _REGISTRY.append(files_digest(sorted(p for p in root.rglob("*") if p.is_file()), root))
    return _REGISTRY[0]


class Runner:
    def __init__(self, prof, remote_env: dict | None = None):
        self.prof = prof
        no_cache = os.environ.get("MINIBUILD_NO_CACHE") == "1"
        self.local = None if no_cache else cache_mod.LocalCache()
        self._remote_env = remote_env or {}
        self._remote = []
        self.records: list[dict] = []
        self._lock = threading.Lock()

    def remote(self):
        if not self._remote:
            env = {**os.environ, **self._remote_env}
            if self.local is None or not env.get("MINIBUILD_REMOTE_CACHE"):
                self._remote.append(None)
            else:
                from .remote_cache import RemoteCache
                self._remote.append(RemoteCache.from_env(env))
        return self._remote[0]

    def remote_env(self) -> dict:
        """The remote-cache environment for the SCons run: none once this process found
        the server unusable (it warned once; the compiles need not find out again)."""
        if self._remote and self._remote[0] is not None and self._remote[0].disabled:
            return {"MINIBUILD_REMOTE_CACHE": ""}
        return dict(self._remote_env)

    def run(self, kind: str, name: str, parts, make) -> dict[str, bytes]:
        t0 = time.time()
        if self.local is None:
            outputs, where = make(), "off"
        else:
            key = cache_mod.action_key("python-action", kind, code_digest(), *parts)
            outputs, where = self.local.get(key), "hit-local"
            if outputs is None and self.remote() is not None:
                outputs, where = self.remote().get(key), "hit-remote"
                if outputs is not None:
                    self.local.put(key, outputs)
            if outputs is None:
                outputs, where = make(), "miss"
                self.local.put(key, outputs)
                if self.remote() is not None:
                    self.remote().put(key, outputs)
        t1 = time.time()
        with self._lock:
            self.records.append({"name": f"{kind} {name}", "cache": where, "start": t0, "end": t1})
        self.prof.add(f"{kind} {name}", "python action", t0, t1, cache=where, rc=0, output=name)
        return outputs


@contextmanager
def running(prof, remote_env: dict | None = None):
    """Python-side actions inside this block are cached and recorded in the Runner given."""
    runner = Runner(prof, remote_env)
    token = _CURRENT.set(runner)
    try:
        yield runner
    finally:
        _CURRENT.reset(token)


def cached(kind: str, name: str, parts, make) -> dict[str, bytes]:
    runner = _CURRENT.get()
    return make() if runner is None else runner.run(kind, name, [str(p) for p in parts], make)


def archive(name: str, fn, files: dict[str, bytes], **kw) -> bytes:
    """`fn(files, **kw)` (an archive.py writer: zip_bytes, tar_gz_bytes) as a cached
    "package" action keyed by the entries' names and bytes, in order, and the options."""
    parts = [fn.__name__, repr(sorted(kw.items(), key=lambda kv: kv[0]))]
    parts += [f"{n}\0{digest(d)}" for n, d in files.items()]
    return cached("package", name, parts, lambda: {"archive": fn(files, **kw)})["archive"]

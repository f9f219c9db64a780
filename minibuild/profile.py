"""`--profile FILE`: the whole build as a Chrome trace (trace-event JSON, `traceEvents`),
viewable in Perfetto (ui.perfetto.dev) or chrome://tracing.

Each step of the flow is a span on the thread that ran it (scan + optimise per model,
manifest, codegen, compile, convert, package per platform, report). Compile and link
actions come from the SCons run: the SConstruct records each command it spawns
(start, end, thread, output) into BUILD/actions.jsonl, read back here. An action SCons
found up to date did not run and has no span; the summary line counts them.
minibuild's own actions (codegen, convert, javac, package: minibuild/actions.py) are
spans of category "python action". Each action's `cache` is "hit-local" or
"hit-remote" (its outputs came from the local or the remote action cache), "miss" (it
ran and stored them), or "off" (the cache is off). A build the no-op stamp skips
(minibuild/stamp.py) is one span of category "stamp".

A leaf: imports nothing of minibuild, so every step may use it."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

_PID = 1


class Profile:
    def __init__(self):
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._threads: dict[int, int] = {}

    def _tid(self, ident: int) -> int:
        return self._threads.setdefault(ident, len(self._threads) + 1)

    def add(self, name: str, cat: str, start: float, end: float, thread: int | None = None, **args) -> None:
        """A complete span; `start`/`end` are time.time() seconds (shared with SCons' process)."""
        with self._lock:
            self.events.append({"name": name, "cat": cat, "ph": "X", "pid": _PID,
                                "tid": self._tid(thread if thread is not None else threading.get_ident()),
                                "ts": round(start * 1e6), "dur": max(round((end - start) * 1e6), 1),
                                "args": args})

    @contextmanager
    def span(self, name: str, cat: str = "step", **args):
        t0 = time.time()
        try:
            yield
        finally:
            self.add(name, cat, t0, time.time(), **args)

    def add_actions(self, path: Path) -> int:
        """The SCons actions recorded in `path` (JSON lines); returns how many ran."""
        if not Path(path).is_file():
            return 0
        n = 0
        for line in Path(path).read_text().splitlines():
            try:
                a = json.loads(line)
            except ValueError:
                continue  # a line cut short by an interrupted build
            self.add(a["name"], a.get("cat", "action"), a["start"], a["end"], thread=10_000 + a["thread"],
                     cache=a.get("cache", "off"), rc=a.get("rc", 0), output=a.get("output", ""))
            n += 1
        return n

    def write(self, path: Path) -> Path:
        base = min((e["ts"] for e in self.events), default=0)
        events = [dict(e, ts=e["ts"] - base) for e in sorted(self.events, key=lambda e: (e["ts"], e["tid"]))]
        names = [{"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid,
                  "args": {"name": "minibuild" if tid == 1 else
                           ("scons action thread" if ident >= 10_000 else f"thread {tid}")}}
                 for ident, tid in sorted(self._threads.items(), key=lambda kv: kv[1])]
        doc = {"traceEvents": names + events, "displayTimeUnit": "ms",
               "otherData": {"tool": "minibuild", "pid": os.getpid()}}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_text(json.dumps(doc, indent=0))
        os.replace(tmp, path)
        return path


class _Null:
    """What steps see when no --profile was asked for: spans cost nothing."""

    @contextmanager
    def span(self, name: str, cat: str = "step", **args):
        yield

    def add(self, *a, **k):
        pass

    def add_actions(self, path):
        return 0


NULL = _Null()

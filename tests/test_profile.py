"""--profile: a Chrome trace-event file of the whole build (every step, every compile
and link action SCons ran, on the thread it ran on) and the one-line action summary."""

from __future__ import annotations

import json

from minibuild import cli


def _complete(events):
    return [e for e in events if e.get("ph") == "X"]


def test_profile_traces_every_step_and_action(tmp_path, classifier_dir, capsys):
    out, trace = tmp_path / "out", tmp_path / "trace.json"
    assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--abi", "x86_64",
                     "--profile", str(trace), "-j", "2"]) == 0
    err = capsys.readouterr().err
    doc = json.loads(trace.read_text())
    events = _complete(doc["traceEvents"])
    for e in events:  # the fields chrome://tracing and Perfetto need for a complete event
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 1
        assert {"name", "cat", "pid", "tid"} <= set(e)
    cats = {e["cat"] for e in events}
    assert {"scan", "manifest", "select", "codegen", "compile", "action", "convert", "package", "report"} <= cats
    plan = json.loads((out / "build" / "plan.json").read_text())
    objects = {f"{t['name']}/{o['target']}" for t in plan["targets"] for o in t["objects"]}
    compiled = {e["name"].split(" ", 1)[1] for e in events if e["cat"] == "action" and e["name"].startswith("compile ")}
    assert objects == compiled
    links = [e for e in events if e["cat"] == "action" and e["name"].startswith("link ")]
    assert any(e["name"].endswith("libminirt.so") for e in links)
    scons = next(e for e in events if e["cat"] == "compile")
    for a in (e for e in events if e["cat"] == "action"):
        assert scons["ts"] <= a["ts"] and a["ts"] + a["dur"] <= scons["ts"] + scons["dur"] + 1000
        assert a["args"]["rc"] == 0
        # every compile and link step goes through the action cache (a hit when an earlier
        # test built the same thing)
        assert a["args"]["cache"] in ("miss", "hit-local")
    assert any(m["ph"] == "M" and m["name"] == "thread_name" for m in doc["traceEvents"])
    # codegen, convert and package are cached actions of minibuild's own process
    py = [e for e in events if e["cat"] == "python action"]
    assert {e["name"].split(" ", 1)[0] for e in py} >= {"codegen", "convert", "package"}
    assert all(e["args"]["cache"] in ("miss", "hit-local") for e in py)
    n = len([e for e in events if e["cat"] in ("action", "python action")])
    assert f"{n} action(s) run (" in err and ", 0 up to date" in err


def test_no_change_rebuild_runs_no_action(tmp_path, classifier_dir, capsys):
    out = tmp_path / "out"
    assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--abi", "x86_64"]) == 0
    capsys.readouterr()
    trace = tmp_path / "again.json"
    assert cli.main(["--models", str(classifier_dir), "--out", str(out), "--abi", "x86_64", "--profile", str(trace)]) == 0
    err = capsys.readouterr().err
    assert " 0 action(s) run (" in err and "up to date" in err
    events = _complete(json.loads(trace.read_text())["traceEvents"])
    assert not [e for e in events if e["cat"] == "action"]

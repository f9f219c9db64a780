"""The remote cache over Bazel's HTTP protocol, against a real nginx (Debian's, WebDAV
PUT on) started by the tests on 127.0.0.1: a second machine (an empty local cache)
gets every object from it; read-only builds never write; a poisoned blob is refused
and rebuilt; a server that is down or refuses us degrades to a local build with one
warning; auth headers are sent."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

import models
import servers
from minibuild import cli
from minibuild.remote_cache import decode_result

pytestmark = pytest.mark.skipif(servers.NGINX is None, reason="nginx (Debian: nginx) is not installed")
LIB = "linux/x86_64/lib/libminirt.so"
TOKEN = "Bearer s3cret"


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    try:
        proc, url, www = servers.start_webdav_nginx(tmp_path_factory.mktemp("nginx"), {"open": None, "auth": TOKEN})
    except RuntimeError as e:
        pytest.fail(str(e))
    yield url, www
    proc.terminate()
    proc.wait(timeout=10)


def _build(models_dir, out, local_cache, monkeypatch, *extra):
    monkeypatch.setenv("MINIBUILD_CACHE", str(local_cache))   # a machine's own cache: empty on a new machine
    assert cli.main(["--models", str(models_dir), "--out", str(out), "--abi", "x86_64", *extra]) == 0
    return [json.loads(line) for line in (out / "build" / "actions.jsonl").read_text().splitlines()
            if json.loads(line)["name"].startswith("compile ")]


def _all_actions(out: Path) -> list[dict]:
    """Every action of the last build: SCons' and minibuild's own (codegen, convert, package)."""
    return [json.loads(line) for log in ("actions.jsonl", "python-actions.jsonl")
            for line in (out / "build" / log).read_text().splitlines()]


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} if d.exists() else set()


def test_a_fresh_machine_gets_every_object_from_the_server(tmp_path, classifier_dir, nginx, monkeypatch, capsys):
    url, www = nginx
    first = _build(classifier_dir, tmp_path / "a", tmp_path / "cache-a", monkeypatch, "--remote-cache", f"{url}/open")
    assert {a["cache"] for a in first} <= {"miss", "hit-remote"}
    stored = _files(www / "open")
    acs = [f for f in stored if f.startswith("ac/")]
    assert len(acs) >= len(first) and any(f.startswith("cas/") for f in stored)
    for f in acs:  # what Bazel's tools read: REAPI ActionResult messages naming CAS digests that exist
        for path, digest, size in decode_result((www / "open" / f).read_bytes()):
            assert (www / "open" / "cas" / digest).stat().st_size == size
    # a compile's object, a link step's outputs by their path in the target's folder,
    # and minibuild's own actions (codegen's files, a converted model, an archive)
    names = {path for f in acs for path, _, _ in decode_result((www / "open" / f).read_bytes())}
    assert {"object", "lib/libminirt.so", "lib/libminirt.so.map", "registry.c", "mrt", "archive"} <= names, names
    second = _build(classifier_dir, tmp_path / "b", tmp_path / "cache-b", monkeypatch, "--remote-cache", f"{url}/open")
    assert len(second) == len(first) and all(a["cache"] == "hit-remote" for a in second)
    everything = _all_actions(tmp_path / "b")
    assert any(a["name"].startswith("link ") for a in everything) and any(
        a["name"].startswith("convert ") for a in everything)
    assert all(a["cache"] == "hit-remote" for a in everything)      # links and minibuild's own actions too
    assert f"(0 from the local cache, {len(everything)} from the remote cache, 0 executed)" \
        in capsys.readouterr().err

    assert (tmp_path / "a" / LIB).read_bytes() == (tmp_path / "b" / LIB).read_bytes()


def test_read_only_builds_never_write(tmp_path, nginx, monkeypatch):
    url, www = nginx
    d = tmp_path / "models"
    d.mkdir()
    onnx.save(models.no_gemm_model(seed=7), d / "other.onnx")
    before = _files(www / "open")
    acts = _build(d, tmp_path / "ro", tmp_path / "cache-ro", monkeypatch, "--remote-cache", f"{url}/open",
                  "--remote-read-only")
    assert acts
    assert _files(www / "open") == before


def test_a_poisoned_blob_is_refused_and_the_object_rebuilt(tmp_path, classifier_dir, nginx, monkeypatch):
    url, www = nginx
    _build(classifier_dir, tmp_path / "a", tmp_path / "cache-a", monkeypatch, "--remote-cache", f"{url}/open")
    blobs = sorted((www / "open" / "cas").iterdir())
    for b in blobs:
        b.write_bytes(b"\x7fELF not what the digest says")
    acts = _build(classifier_dir, tmp_path / "b", tmp_path / "cache-b", monkeypatch, "--remote-cache", f"{url}/open",
                  "--remote-read-only")
    assert acts and all(a["cache"] == "miss" for a in acts)
    assert (tmp_path / "a" / LIB).read_bytes() == (tmp_path / "b" / LIB).read_bytes()
    shutil.rmtree(www / "open")   # leave no poisoned entries for other tests


def test_server_down_builds_locally_with_one_warning(tmp_path, classifier_dir, monkeypatch, capsys):
    acts = _build(classifier_dir, tmp_path / "a", tmp_path / "cache", monkeypatch,
                  "--remote-cache", f"http://127.0.0.1:{servers.free_port()}")
    assert acts and all(a["cache"] == "miss" for a in acts)
    err = capsys.readouterr().err
    assert err.count("is not usable") == 1 and "building without it" in err


def test_auth_header(tmp_path, classifier_dir, nginx, monkeypatch, capsys):
    url, www = nginx
    _build(classifier_dir, tmp_path / "a", tmp_path / "c1", monkeypatch, "--remote-cache", f"{url}/auth")
    err = capsys.readouterr().err
    assert "HTTP 401" in err and err.count("is not usable") == 1
    assert not _files(www / "auth")
    _build(classifier_dir, tmp_path / "b", tmp_path / "c2", monkeypatch, "--remote-cache", f"{url}/auth",
           "--remote-header", f"Authorization={TOKEN}")
    assert any(f.startswith("ac/") for f in _files(www / "auth"))
    acts = _build(classifier_dir, tmp_path / "c", tmp_path / "c3", monkeypatch, "--remote-cache", f"{url}/auth",
                  "--remote-header", f"Authorization={TOKEN}")
    assert all(a["cache"] == "hit-remote" for a in acts)
    assert TOKEN not in (tmp_path / "c" / "build" / "plan.json").read_text()   # secrets never reach a file


# --- the Remote Execution API over gRPC, against BuildGrid ---------------------------

ROOT = Path(__file__).resolve().parent.parent
BGD = next((p for p in (ROOT / ".venv-buildgrid" / "bin" / "bgd", shutil.which("bgd")) if p and Path(p).exists()), None)


@pytest.fixture(scope="module")
def buildgrid(tmp_path_factory):
    if BGD is None:
        pytest.skip("BuildGrid is not installed (.ci/setup-buildgrid.sh puts it in .venv-buildgrid)")
    root = tmp_path_factory.mktemp("buildgrid")
    port = servers.free_port()
    (root / "bgd.yml").write_text(f"""
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
authorization:
  method: none
storages:
  - !disk-storage &store
    path: {root / 'cas'}
caches:
  - !lru-action-cache &ac
    storage: *store
    max-cached-refs: 4096
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: ci
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *store
      - !bytestream
        storage: *store
""")
    log = open(root / "bgd.log", "w")
    proc = subprocess.Popen([str(BGD), "server", "start", str(root / "bgd.yml")], stdout=log, stderr=subprocess.STDOUT)
    if not servers.wait_for_port(port, proc, 240, 0.1) and proc.poll() is None:  # it takes a few seconds
        proc.kill()
        pytest.fail(f"BuildGrid did not start: {(root / 'bgd.log').read_text()[-2000:]}")
    if proc.poll() is not None:
        pytest.fail(f"BuildGrid exited: {(root / 'bgd.log').read_text()[-2000:]}")
    yield f"grpc://127.0.0.1:{port}/ci"
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_grpc_a_fresh_machine_gets_every_object_from_buildgrid(tmp_path, classifier_dir, buildgrid, monkeypatch, capsys):
    first = _build(classifier_dir, tmp_path / "a", tmp_path / "cache-a", monkeypatch, "--remote-cache", buildgrid)
    assert first
    second = _build(classifier_dir, tmp_path / "b", tmp_path / "cache-b", monkeypatch, "--remote-cache", buildgrid)
    assert len(second) == len(first) and all(a["cache"] == "hit-remote" for a in second)
    err = capsys.readouterr().err
    everything = _all_actions(tmp_path / "b")
    assert all(a["cache"] == "hit-remote" for a in everything)     # the link steps and Python actions too
    assert "is not usable" not in err and f"{len(everything)} from the remote cache, 0 executed" in err
    assert (tmp_path / "a" / LIB).read_bytes() == (tmp_path / "b" / LIB).read_bytes()


def test_grpc_read_only_and_unknown_instance(tmp_path, buildgrid, monkeypatch, capsys):
    d = tmp_path / "models"
    d.mkdir()
    onnx.save(models.no_gemm_model(seed=11), d / "other.onnx")
    ro = _build(d, tmp_path / "ro", tmp_path / "c1", monkeypatch, "--remote-cache", buildgrid, "--remote-read-only")
    missed = {a["name"].split("/obj/", 1)[1] for a in ro if a["cache"] == "miss"}
    assert missed   # its kernels are new to the server (objects earlier tests stored may hit)
    again = _build(d, tmp_path / "ro2", tmp_path / "c2", monkeypatch, "--remote-cache", buildgrid)
    # what the read-only build compiled, it did not store: a second machine compiles it too
    assert {a["name"].split("/obj/", 1)[1] for a in again if a["cache"] == "miss"} == missed
    capsys.readouterr()
    _build(d, tmp_path / "x", tmp_path / "c3", monkeypatch, "--remote-cache", buildgrid.rsplit("/", 1)[0] + "/nope")
    err = capsys.readouterr().err
    assert err.count("is not usable") == 1    # BuildGrid refuses an instance it does not serve: one warning


def test_reapi_messages_match_the_protos_buildgrid_ships():
    """Our REAPI subset has the field numbers and types of the real protos."""
    if BGD is None:
        pytest.skip("BuildGrid is not installed")
    from minibuild.remote_cache import _SCHEMA
    real = {"UpdateBlob": "BatchUpdateBlobsRequest.Request", "UpdatedBlob": "BatchUpdateBlobsResponse.Response",
            "ReadBlob": "BatchReadBlobsResponse.Response", "Status": None}
    code = ("import json, sys\n"
            "from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re\n"
            "out = {}\n"
            "for name in sys.argv[1:]:\n"
            "    m = re\n"
            "    for part in name.split('.'):\n"
            "        m = getattr(m, part)\n"
            "    out[name] = {f.name: [f.number, f.type, bool(f.is_repeated) if hasattr(f, 'is_repeated')\n"
            "                          else f.label == 3] for f in m.DESCRIPTOR.fields}\n"
            "print(json.dumps(out))\n")
    names = [real.get(n, n) for n in _SCHEMA if real.get(n, n)]
    py = Path(BGD).parent / "python"
    got = json.loads(subprocess.run([str(py), "-c", code, *names], capture_output=True, text=True, check=True).stdout)
    from google.protobuf.descriptor import FieldDescriptor as F
    types = {"string": F.TYPE_STRING, "int64": F.TYPE_INT64, "int32": F.TYPE_INT32, "bool": F.TYPE_BOOL,
             "bytes": F.TYPE_BYTES}
    for ours, fields in _SCHEMA.items():
        theirs = real.get(ours, ours)
        if theirs is None:
            continue
        for fname, number, kind in fields:
            n, t, repeated = got[theirs][fname]
            assert n == number, (ours, fname)
            assert t == types.get(kind.lstrip("*"), F.TYPE_MESSAGE), (ours, fname)
            assert repeated == kind.startswith("*"), (ours, fname)

"""A remote action cache over Bazel's HTTP caching protocol, so a CI fleet shares the
servers Bazel users already run (bazel-remote, nginx with WebDAV, a bucket behind a
proxy):

    GET/PUT  URL/ac/<action key>   an ActionResult message of the Remote Execution API
                                   (build.bazel.remote.execution.v2), naming each output
                                   file by path and by the digest of its bytes
    GET/PUT  URL/cas/<sha256>      the bytes of one output

Configured by the environment the build runs in (minibuild's --remote-cache options
set it): MINIBUILD_REMOTE_CACHE=URL, MINIBUILD_REMOTE_HEADERS (a JSON object of extra
request headers, e.g. Authorization), MINIBUILD_REMOTE_READ_ONLY=1 (untrusted
pull-request builds read but never write), MINIBUILD_REMOTE_TIMEOUT (seconds).

Every blob read is checked against its digest; a corrupt or poisoned entry is refused
and the action runs. A server that is down, slow or failing turns the remote cache off
for the rest of the build with one warning: the build goes on locally, never fails
because of it. A leaf: imports nothing of minibuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import urllib.error
import urllib.request

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "build.bazel.remote.execution.v2"


def _messages():
    """Digest, OutputFile and ActionResult, with the REAPI's field numbers (a subset:
    what a cached action here produces; other fields decode as unknown and are kept)."""
    f = descriptor_pb2.FileDescriptorProto(name="minibuild_reapi_subset.proto", package=_PACKAGE, syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    digest = f.message_type.add(name="Digest")
    digest.field.add(name="hash", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    digest.field.add(name="size_bytes", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    out = f.message_type.add(name="OutputFile")
    out.field.add(name="path", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    out.field.add(name="digest", number=2, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL, type_name=f".{_PACKAGE}.Digest")
    out.field.add(name="is_executable", number=4, type=T.TYPE_BOOL, label=T.LABEL_OPTIONAL)
    result = f.message_type.add(name="ActionResult")
    result.field.add(name="output_files", number=2, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                     type_name=f".{_PACKAGE}.OutputFile")
    result.field.add(name="exit_code", number=4, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.ActionResult"))


ActionResult = _messages()


def encode_result(outputs: dict[str, bytes]) -> tuple[bytes, dict[str, bytes]]:
    """(ActionResult bytes, blobs by sha256) for outputs name -> bytes."""
    msg, blobs = ActionResult(), {}
    for name, data in sorted(outputs.items()):
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        f = msg.output_files.add(path=name)
        f.digest.hash, f.digest.size_bytes = digest, len(data)
    return msg.SerializeToString(), blobs


def decode_result(data: bytes) -> list[tuple[str, str, int]]:
    """[(path, sha256, size)] of an ActionResult; ValueError when it is not one."""
    msg = ActionResult()
    try:
        msg.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError, a subclass of Exception
        raise ValueError(f"not an ActionResult: {e}") from None
    if msg.exit_code != 0:
        raise ValueError("the cached action failed")
    return [(f.path, f.digest.hash, f.digest.size_bytes) for f in msg.output_files]


class RemoteCache:
    def __init__(self, url: str, headers: dict | None = None, read_only: bool = False, timeout: float = 10.0,
                 retries: int = 2, warn=None):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"remote cache {url!r}: expected an http:// or https:// URL "
                             "(Bazel's HTTP caching protocol: URL/ac/ and URL/cas/)")
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.read_only = read_only
        self.timeout = timeout
        self.retries = retries
        self.disabled: str | None = None
        self._warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "uploads": 0, "refused": 0}

    @classmethod
    def from_env(cls, env=None, warn=None) -> "RemoteCache | None":
        env = os.environ if env is None else env
        url = env.get("MINIBUILD_REMOTE_CACHE")
        if not url:
            return None
        headers = json.loads(env.get("MINIBUILD_REMOTE_HEADERS") or "{}")
        return cls(url, headers, env.get("MINIBUILD_REMOTE_READ_ONLY") == "1",
                   float(env.get("MINIBUILD_REMOTE_TIMEOUT") or 10), warn=warn)

    def _disable(self, why: str) -> None:
        with self._lock:
            if self.disabled is None:
                self.disabled = why
                self._warn(f"remote cache {self.url} is not usable ({why}); building without it")

    def _request(self, method: str, path: str, data: bytes | None = None) -> bytes | None:
        """The body of a 2xx answer; None for 404 (a miss). Network trouble, 5xx or
        an unexpected status after the retries turn the remote cache off."""
        if self.disabled:
            return None
        last = ""
        for _ in range(self.retries + 1):
            req = urllib.request.Request(f"{self.url}/{path}", data=data, method=method, headers=self.headers)
            if data is not None:
                req.add_header("Content-Type", "application/octet-stream")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return resp.read()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                last = f"HTTP {e.code} for {method} /{path}"
                if e.code < 500:  # 401/403/405...: retrying will not help
                    break
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        self._disable(last)
        return None

    def get(self, key: str) -> dict[str, bytes] | None:
        data = self._request("GET", f"ac/{key}")
        if data is None:
            if not self.disabled:
                self.stats["misses"] += 1
            return None
        try:
            files = decode_result(data)
        except ValueError:
            self.stats["refused"] += 1
            return None
        outputs = {}
        for path, digest, size in files:
            blob = self._request("GET", f"cas/{digest}")
            if blob is None or len(blob) != size or hashlib.sha256(blob).hexdigest() != digest:
                self.stats["refused" if blob is not None else "misses"] += 1
                return None
            outputs[path] = blob
        self.stats["hits"] += 1
        return outputs

    def put(self, key: str, outputs: dict[str, bytes]) -> None:
        if self.read_only or self.disabled:
            return
        result, blobs = encode_result(outputs)
        for digest, blob in blobs.items():  # blobs first: an action result never names a missing blob
            if self._request("PUT", f"cas/{digest}", blob) is None and self.disabled:
                return
        if self._request("PUT", f"ac/{key}", result) is not None or not self.disabled:
            self.stats["uploads"] += 1

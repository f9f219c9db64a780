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


# The Remote Execution API messages this cache speaks (a subset of each, with the
# REAPI's own field numbers; tests/test_remote_cache.py checks them against the REAPI
# protos BuildGrid ships). Fields not listed decode as unknown fields and are kept.
_SCHEMA = {
    "Digest": [("hash", 1, "string"), ("size_bytes", 2, "int64")],
    "OutputFile": [("path", 1, "string"), ("digest", 2, "Digest"), ("is_executable", 4, "bool")],
    "ActionResult": [("output_files", 2, "*OutputFile"), ("exit_code", 4, "int32")],
    "Status": [("code", 1, "int32"), ("message", 2, "string")],       # google.rpc.Status
    "GetActionResultRequest": [("instance_name", 1, "string"), ("action_digest", 2, "Digest")],
    "UpdateActionResultRequest": [("instance_name", 1, "string"), ("action_digest", 2, "Digest"),
                                  ("action_result", 3, "ActionResult")],
    "FindMissingBlobsRequest": [("instance_name", 1, "string"), ("blob_digests", 2, "*Digest")],
    "FindMissingBlobsResponse": [("missing_blob_digests", 2, "*Digest")],
    "UpdateBlob": [("digest", 1, "Digest"), ("data", 2, "bytes")],    # BatchUpdateBlobsRequest.Request
    "BatchUpdateBlobsRequest": [("instance_name", 1, "string"), ("requests", 2, "*UpdateBlob")],
    "UpdatedBlob": [("digest", 1, "Digest"), ("status", 2, "Status")],  # BatchUpdateBlobsResponse.Response
    "BatchUpdateBlobsResponse": [("responses", 1, "*UpdatedBlob")],
    "BatchReadBlobsRequest": [("instance_name", 1, "string"), ("digests", 2, "*Digest")],
    "ReadBlob": [("digest", 1, "Digest"), ("data", 2, "bytes"), ("status", 3, "Status")],  # ...Response.Response
    "BatchReadBlobsResponse": [("responses", 1, "*ReadBlob")],
}


def _messages() -> dict:
    f = descriptor_pb2.FileDescriptorProto(name="minibuild_reapi_subset.proto", package=_PACKAGE, syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    scalars = {"string": T.TYPE_STRING, "int64": T.TYPE_INT64, "int32": T.TYPE_INT32, "bool": T.TYPE_BOOL,
               "bytes": T.TYPE_BYTES}
    for name, fields in _SCHEMA.items():
        m = f.message_type.add(name=name)
        for fname, number, kind in fields:
            repeated = kind.startswith("*")
            kind = kind.lstrip("*")
            label = T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL
            if kind in scalars:
                m.field.add(name=fname, number=number, type=scalars[kind], label=label)
            else:
                m.field.add(name=fname, number=number, type=T.TYPE_MESSAGE, label=label, type_name=f".{_PACKAGE}.{kind}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _SCHEMA}


MESSAGES = _messages()
ActionResult = MESSAGES["ActionResult"]


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
        kind = GrpcRemoteCache if url.startswith(("grpc://", "grpcs://")) else cls
        return kind(url, headers, env.get("MINIBUILD_REMOTE_READ_ONLY") == "1",
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
        return self._verified(files, lambda digest: self._request("GET", f"cas/{digest}"))

    def _verified(self, files: list[tuple[str, str, int]], blob_of) -> dict[str, bytes] | None:
        """Each output's bytes (blob_of(sha256)), checked against its digest and size:
        a blob that does not match is refused, and the whole result with it."""
        outputs = {}
        for path, digest, size in files:
            blob = blob_of(digest)
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


class GrpcRemoteCache(RemoteCache):
    """The same cache over the Remote Execution API's gRPC services, for fleets that
    run Buildbarn, BuildBuddy, NativeLink or BuildGrid: ActionCache.GetActionResult /
    UpdateActionResult, ContentAddressableStorage.FindMissingBlobs / BatchUpdateBlobs /
    BatchReadBlobs. URL: grpc://host:port[/instance] (grpcs:// for TLS). Headers go as
    gRPC metadata (lower-cased names)."""

    _AC = f"/{_PACKAGE}.ActionCache/"
    _CAS = f"/{_PACKAGE}.ContentAddressableStorage/"

    def __init__(self, url: str, headers: dict | None = None, read_only: bool = False, timeout: float = 10.0,
                 retries: int = 2, warn=None):
        import grpc
        from urllib.parse import urlparse
        u = urlparse(url)
        if u.scheme not in ("grpc", "grpcs") or not u.hostname or not u.port:
            raise ValueError(f"remote cache {url!r}: expected grpc://HOST:PORT[/INSTANCE] or grpcs://...")
        self.url, self.headers, self.read_only, self.timeout, self.retries = url, dict(headers or {}), read_only, timeout, retries
        self.instance = u.path.strip("/")
        self.disabled = None
        self._warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "uploads": 0, "refused": 0}
        target = f"{u.hostname}:{u.port}"
        self._grpc = grpc
        self._channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials()) if u.scheme == "grpcs"
                         else grpc.insecure_channel(target))
        self._metadata = [(k.lower(), v) for k, v in self.headers.items()]

    def _call(self, path: str, request, response: str):
        """The response message; None for NOT_FOUND; other failures turn the cache off."""
        if self.disabled:
            return None
        grpc = self._grpc
        method = self._channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                           response_deserializer=MESSAGES[response].FromString)
        last = ""
        for _ in range(self.retries + 1):
            try:
                return method(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                last = f"{path.rsplit('/', 1)[-1]}: {e.code().name} {e.details() or ''}".strip()
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                    grpc.StatusCode.RESOURCE_EXHAUSTED):
                    break
        self._disable(last)
        return None

    def _digest(self, hexdigest: str, size: int):
        return MESSAGES["Digest"](hash=hexdigest, size_bytes=size)

    def get(self, key: str) -> dict[str, bytes] | None:
        req = MESSAGES["GetActionResultRequest"](instance_name=self.instance, action_digest=self._digest(key, 0))
        result = self._call(self._AC + "GetActionResult", req, "ActionResult")
        if result is None:
            if not self.disabled:
                self.stats["misses"] += 1
            return None
        if result.exit_code != 0:
            self.stats["refused"] += 1
            return None
        files = [(f.path, f.digest.hash, f.digest.size_bytes) for f in result.output_files]
        read = MESSAGES["BatchReadBlobsRequest"](instance_name=self.instance,
                                                 digests=[self._digest(d, n) for _, d, n in files])
        resp = self._call(self._CAS + "BatchReadBlobs", read, "BatchReadBlobsResponse")
        if resp is None:
            return None
        blobs = {r.digest.hash: r.data for r in resp.responses if r.status.code == 0}
        return self._verified(files, blobs.get)

    def put(self, key: str, outputs: dict[str, bytes]) -> None:
        if self.read_only or self.disabled:
            return
        _, blobs = encode_result(outputs)
        digests = [self._digest(d, len(b)) for d, b in blobs.items()]
        missing = self._call(self._CAS + "FindMissingBlobs",
                             MESSAGES["FindMissingBlobsRequest"](instance_name=self.instance, blob_digests=digests),
                             "FindMissingBlobsResponse")
        if missing is None:
            return
        want = {d.hash for d in missing.missing_blob_digests}
        if want:
            upd = MESSAGES["BatchUpdateBlobsRequest"](instance_name=self.instance, requests=[
                MESSAGES["UpdateBlob"](digest=self._digest(d, len(b)), data=b) for d, b in blobs.items() if d in want])
            resp = self._call(self._CAS + "BatchUpdateBlobs", upd, "BatchUpdateBlobsResponse")
            if resp is None or any(r.status.code != 0 for r in resp.responses):
                return
        result = MESSAGES["ActionResult"]()
        for d, b in sorted(blobs.items()):
            name = next(n for n, data in outputs.items() if hashlib.sha256(data).hexdigest() == d)
            f = result.output_files.add(path=name)
            f.digest.hash, f.digest.size_bytes = d, len(b)
        req = MESSAGES["UpdateActionResultRequest"](instance_name=self.instance, action_digest=self._digest(key, 0),
                                                    action_result=result)
        if self._call(self._AC + "UpdateActionResult", req, "ActionResult") is not None:
            self.stats["uploads"] += 1

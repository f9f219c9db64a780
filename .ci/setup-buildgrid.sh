#!/bin/sh
# BuildGrid, the Remote Execution API server the gRPC remote-cache tests run on
# 127.0.0.1 (tests/test_remote_cache.py), in a venv of its own: it is a server the
# tests talk to, not a dependency of minibuild. Idempotent. Called by .ci/run.
set -eu
cd "$(dirname "$0")/.."
if [ ! -x .venv-buildgrid/bin/bgd ]; then
    python3 -m venv .venv-buildgrid
    .venv-buildgrid/bin/pip install --quiet buildgrid==0.4.4
fi
.venv-buildgrid/bin/bgd --help >/dev/null

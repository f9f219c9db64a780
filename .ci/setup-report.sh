#!/bin/sh
# Tools the size-report tests need: Debian's chromium (headless, no downloads by
# Playwright: never run `playwright install`), Playwright for Python to drive it,
# and jsonschema to validate size_report.json. Called by .ci/run.
set -eu
PY="${PYTHON:-/tmp/venv/bin/python}"
if ! command -v chromium >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
fi
"$PY" -m pip install --quiet playwright jsonschema

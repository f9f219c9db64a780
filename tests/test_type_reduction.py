"""Type reduction, measured: a real BERT export's op set built with every type
signature the registry offers against the signatures the model uses (what a build
compiles). onnxruntime's reduced build reports 25-33 % of kernel bytes for its type
reduction; ours must cut more."""

from __future__ import annotations

import json

import pytest

import exporters
from minibuild import cli
from minibuild.calibrate import type_reduction


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    missing = exporters.missing_modules(exporters.SPECS["bert_small"])
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    folder, _ = exporters.export_cached(exporters.SPECS["bert_small"], tmp_path_factory.getbasetemp() / "exports")
    return folder


def test_type_reduction_cuts_most_kernel_bytes(bert_dir, capsys):
    r = type_reduction(bert_dir, "linux", "x86_64")
    with capsys.disabled():
        print(f"\ntype reduction, BERT-small op set, {r['target']}: kernel bytes {r['kernel_bytes']['every']} -> "
              f"{r['kernel_bytes']['used']} (-{r['kernel_cut_percent']} %), library {r['library_bytes']['every']} -> "
              f"{r['library_bytes']['used']} B; signatures {r['signatures']['used']}/{r['signatures']['every']}")
    assert r["signatures"]["used"] < r["signatures"]["every"]
    assert r["kernel_objects"]["used"] < r["kernel_objects"]["every"]
    assert r["kernel_bytes"]["used"] + r["kernel_bytes_cut"] == r["kernel_bytes"]["every"]
    assert r["kernel_cut_percent"] > 33.0
    assert r["library_bytes"]["used"] < r["library_bytes"]["every"]


def test_size_types_command(bert_dir, capsys):
    assert cli.main(["size", "types", "--models", str(bert_dir), "--abi", "x86_64", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["target"] == "linux-x86_64" and r["kernel_bytes_cut"] > 0

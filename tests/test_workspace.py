"""The workspace file: named targets built with `minibuild build [NAME...]` in one
SCons run, each into its own folder; checked against its schema before anything runs."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest

import models
from minibuild import cli

WORKSPACE = """\
out: out
targets:
  app-linux:
    models: models/
    platforms: [linux]
    abis: [x86_64]
  tiny:
    models: "models/tiny*.onnx"
    platforms: [linux]
    abis: [x86_64]
    fix_dims: {}
    package_version: 2.0.0
"""


@pytest.fixture
def ws(tmp_path, classifier_dir):
    (tmp_path / "models").mkdir()
    shutil.copy(classifier_dir / "small_classifier.onnx", tmp_path / "models")
    onnx.save(models.no_gemm_model(), tmp_path / "models" / "tiny_cnn.onnx")
    (tmp_path / "minibuild.yaml").write_text(WORKSPACE)
    return tmp_path


def _manifest_models(out):
    text = (out / "manifest" / "required_ops.yaml").read_text()
    return sorted(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("- name:"))


def test_all_targets_build_in_one_run_each_into_its_folder(ws, capsys, monkeypatch):
    monkeypatch.chdir(ws)
    assert cli.main(["build"]) == 0
    err = capsys.readouterr().err
    assert "app-linux/linux-x86_64" in err and "tiny/linux-x86_64" in err   # one compile step, both targets
    assert err.count("done in") == 1
    assert _manifest_models(ws / "out" / "app-linux") == ["small_classifier", "tiny_cnn"]
    assert _manifest_models(ws / "out" / "tiny") == ["tiny_cnn"]          # the glob chose one model
    for t in ("app-linux", "tiny"):
        assert (ws / "out" / t / "linux" / "x86_64" / "lib" / "libminirt.so").is_file()
        assert json.loads((ws / "out" / t / "size_report.json").read_text())["artifacts"]
    assert (ws / "out" / ".build" / ".sconsign.dblite").is_file()       # one SCons state for the graph
    # The same target built alone with the plain command gives the same library, byte for byte.
    assert cli.main(["--models", str(ws / "models"), "--out", str(ws / "alone"), "--abi", "x86_64"]) == 0
    assert (ws / "alone/linux/x86_64/lib/libminirt.so").read_bytes() == \
        (ws / "out/app-linux/linux/x86_64/lib/libminirt.so").read_bytes()


def test_named_targets_only_and_no_change_does_nothing(ws, capsys):
    assert cli.main(["build", "tiny", "--workspace", str(ws / "minibuild.yaml")]) == 0
    assert not (ws / "out" / "app-linux").exists()
    capsys.readouterr()
    assert cli.main(["build", "tiny", "--workspace", str(ws / "minibuild.yaml")]) == 0
    assert " 0 action(s) run (" in capsys.readouterr().err


def test_schema_errors_name_the_file_and_every_key(ws, capsys):
    bad = ws / "bad.yaml"
    bad.write_text("targets:\n  app:\n    models: models/\n    platforms: [windows]\n    abis: arm64\n"
                   "    colour: blue\n  'no good!':\n    models: models/\n")
    assert cli.main(["build", "--workspace", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: 4 problem(s)" in err
    for part in ("targets.app.platforms[0]: 'windows' is not one of", "targets.app.abis: 'arm64' is not of type 'array'",
                 "targets.app: Additional properties are not allowed ('colour' was unexpected)", "'no good!' does not match"):
        assert part in err
    assert not (ws / "minibuild-out").exists()


def test_bad_values_name_the_target_and_nothing_is_written(ws, capsys):
    (ws / "minibuild.yaml").write_text("out: out\ntargets:\n  a:\n    models: models/\n    platforms: [android]\n"
                                       "    abis: [arm64]\n")
    assert cli.main(["build", "--workspace", str(ws / "minibuild.yaml")]) == 1
    err = capsys.readouterr().err
    assert "targets.a: platform android has no ABI arm64" in err and "arm64-v8a" in err
    assert not (ws / "out").exists()
    (ws / "minibuild.yaml").write_text("targets:\n  a:\n    models: nowhere/\n")
    assert cli.main(["build", "--workspace", str(ws / "minibuild.yaml")]) == 1
    assert "targets.a.models: 'nowhere/' is not a folder" in capsys.readouterr().err
    (ws / "minibuild.yaml").write_text("targets:\n  a:\n    models: models/\n")
    assert cli.main(["build", "zzz", "--workspace", str(ws / "minibuild.yaml")]) == 1
    assert "no target zzz; targets: a" in capsys.readouterr().err


def test_no_models_and_no_workspace_says_what_to_do(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["build"]) == 1
    assert "no --models and no minibuild.yaml here" in capsys.readouterr().err

"""The command line a newcomer meets: help that lists platforms and says what each
command does, and option errors before anything is scanned or written."""

from __future__ import annotations

import pytest

from minibuild import cli


@pytest.mark.parametrize("argv,code,what", [
    (["--platform", "windows"], 2, "unknown platform 'windows'; known: linux, android, ios, python"),
    (["--platform", "android", "--abi", "arm64"], 2, "platform android has no ABI arm64; known: arm64-v8a"),
    (["-j", "0"], 2, "-j 0: expected a number of parallel jobs >= 1"),
    (["--platform", "android", "--android-package", "not a package"], 2, "not a package"),
    (["--remote-cache", "ftp://x"], 2, "expected an http(s):// URL"),
])
def test_bad_options_fail_before_anything_is_written(tmp_path, classifier_dir, capsys, argv, code, what):
    out = tmp_path / "out"
    assert cli.main(["--models", str(classifier_dir), "--out", str(out), *argv]) == code
    assert what in capsys.readouterr().err
    assert not out.exists()


def test_help_lists_platforms_abis_and_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for part in ("android  Android:", "ABIs: arm64-v8a, armeabi-v7a, x86, x86_64", "ios      iOS:",
                 "python   Python wheels", "minibuild query why|deps|kernels", "minibuild cache stats",
                 "the targets of the workspace file are built"):
        assert part in text, part


@pytest.mark.parametrize("command,part", [("scan", "without compiling"), ("verify", "onnxruntime")])
def test_each_command_says_what_it_does(capsys, command, part):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert part in capsys.readouterr().out

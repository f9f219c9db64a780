"""The build as a build system: selective, incremental, reproducible, clean on failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from elftools.elf.elffile import ELFFile
from onnx import TensorProto, helper

import models
from conftest import build
from minibuild import cli, toolchain
from minibuild.errors import ModelError, UnsupportedOpsError


def _symbols(path: Path) -> set[str]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        tab = elf.get_section_by_name(".symtab")
        return {s.name for s in tab.iter_symbols() if s.name} if tab else set()


def _dynamic_symbols(path: Path) -> set[str]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        return {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
                if s.name and s["st_shndx"] != "SHN_UNDEF"}


def _save(model, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / f"{name}.onnx"))
    return folder


def _elementwise_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])],
                          "ew", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_second_build_with_no_change_compiles_nothing(classifier_dir, tmp_path):
    out = tmp_path / "out"
    first = build(classifier_dir, out)
    assert any("CC" in s for s in first.steps_run)
    lib = first.targets[0].library
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "size_history" not in p.name}
    second = build(classifier_dir, out)
    assert second.steps_run == [], second.steps_run
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p in before}
    changed = [str(p) for p in before if before[p] != after.get(p) and p.suffix not in (".json", ".jsonl", ".md", ".html", ".sqlite", ".sconsign", ".dblite")
               and ".sconsign" not in p.name and "size_report" not in p.name]
    assert changed == [], changed
    assert lib.is_file()


def test_editing_a_model_recompiles_only_what_it_needs(classifier_dir, tmp_path):
    """A model that adds one operator compiles that kernel (and the regenerated
    registry), nothing else."""
    out = tmp_path / "out"
    models_dir = tmp_path / "models"
    shutil.copytree(classifier_dir, models_dir)
    build(models_dir, out)
    _save(_elementwise_model(), models_dir, "extra")  # adds Relu (unfused) and GlobalAveragePool
    res = build(models_dir, out)
    compiled = [s for s in res.steps_run if s.strip().startswith("CC")]
    labels = sorted(s.split()[1] for s in compiled)
    assert labels == ["GlobalAveragePool", "Relu", "registry.c"], compiled


def test_model_without_gemm_has_no_gemm_code(tmp_path):
    out = tmp_path / "out"
    res = build(_save(models.no_gemm_model(), tmp_path / "m", "no_gemm"), out)
    syms = _symbols(res.targets[0].unstripped)
    assert any(s.startswith("mrt_conv") for s in syms)           # the symbol table is real
    gemm_op = [s for s in syms if s.startswith(("mrt_gemm", "mrt_fusedgemm", "mrt_matmul"))]
    assert gemm_op == []
    # Without any convolution there is no GEMM core either.
    res2 = build(_save(_elementwise_model(), tmp_path / "m2", "ew"), tmp_path / "out2")
    syms2 = _symbols(res2.targets[0].unstripped)
    assert any(s.startswith("mrt_relu") for s in syms2)
    assert [s for s in syms2 if "gemm" in s] == []
    assert [s for s in syms2 if s.startswith("mrt_conv")] == []


def test_only_the_c_api_is_exported(classifier_dir, tmp_path):
    res = build(classifier_dir, tmp_path / "out")
    lib = res.targets[0].library
    assert _dynamic_symbols(lib) == set(toolchain.C_API)
    assert _symbols(lib) == set(), "the deliverable must be stripped"


def test_export_list_matches_the_header():
    import re
    from minibuild import resources
    header = resources.path("kernels_src", "include", "minirt.h").read_text()
    declared = set(re.findall(r"MRT_API\s+[\w\s\*]+?\b(mrt_\w+)\s*\(", header))
    assert declared == set(toolchain.C_API)


def test_two_clean_builds_in_different_folders_are_byte_identical(tmp_path, classifier_dir):
    a = build(classifier_dir, tmp_path / "a" / "deep" / "out")
    b = build(classifier_dir, tmp_path / "b" / "out")
    def tree(res):
        root = res.targets[0].dir.parent.parent
        files = {}
        for sub in ("linux", "models", "manifest"):
            for p in sorted((root / sub).rglob("*")):
                if p.is_file():
                    files[str(p.relative_to(root))] = p.read_bytes()
        gen = res.targets[0].dir.parent / "gen"  # shared by every target of the build
        for p in sorted(gen.iterdir()):
            files[f"gen/{p.name}"] = p.read_bytes()
        files["lib.debug"] = res.targets[0].unstripped.read_bytes()
        return files
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb)
    different = [k for k in ta if ta[k] != tb[k]]
    assert different == []
    assert any(k.endswith("libminirt.so") for k in ta) and any(k.endswith(".mrt") for k in ta)
    assert b"/a/deep/" not in ta["lib.debug"] and str(tmp_path).encode() not in ta["lib.debug"]


def _unsupported_model(name: str, ops: list[str]):
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev], [f"t{i}"], name=f"{name}_{op.lower()}_{i}"))
        prev = f"t{i}"
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_ops_fail_before_compiling_with_every_use_listed(tmp_path, capsys):
    models_dir = tmp_path / "models"
    _save(_unsupported_model("alpha", ["Relu", "Sinh", "Cos"]), models_dir, "alpha")
    _save(_unsupported_model("beta", ["Sinh"]), models_dir, "beta")
    out = tmp_path / "out"
    with pytest.raises(UnsupportedOpsError) as err:
        build(models_dir, out)
    missing = err.value.missing
    assert len(missing) == 3
    text = str(err.value)
    for frag in ("model alpha, node 'alpha_sinh_1': ai.onnx.Sinh opset 9 type float32",
                 "model alpha, node 'alpha_cos_2': ai.onnx.Cos opset 7 type float32",
                 "model beta, node 'beta_sinh_0': ai.onnx.Sinh opset 9 type float32"):
        assert frag in text
    assert not (out / "build").exists() and not (out / "linux").exists() and not (out / "models").exists()
    # The CLI says the same and exits non-zero.
    rc = cli.main(["--models", str(models_dir), "--out", str(out)])
    assert rc == 1
    assert "Sinh" in capsys.readouterr().err


def test_dynamic_dimension_needs_fixing(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "d", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    models_dir = _save(m, tmp_path / "m", "dyn")
    with pytest.raises(ModelError, match=r"dyn.onnx: input 'x' has dimension 'batch' at axis 0.*--fix-dim batch=N"):
        build(models_dir, tmp_path / "out")
    res = build(models_dir, tmp_path / "out", fixed_dims={"batch": 3})
    from minibuild.verify import import_minirt
    minirt = import_minirt(tmp_path / "out")
    s = minirt.InferenceSession(res.model_files["dyn"])
    assert s.get_inputs()[0].shape == [3, 4]
    x = np.array([[-1, 2, -3, 4]] * 3, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))


def test_failed_compile_leaves_no_half_written_library(classifier_dir, tmp_path, monkeypatch):
    """A link that fails (here: an input object that does not exist) leaves no
    library in the build tree or the output."""
    out = tmp_path / "out"
    monkeypatch.setattr(toolchain, "zig_shared_link_steps", _failing_link(toolchain.zig_shared_link_steps))
    from minibuild.errors import BuildError
    with pytest.raises(BuildError):
        build(classifier_dir, out)
    libs = [p for p in out.rglob("libminirt.so*")]
    assert libs == [], libs


def _failing_link(real):
    def steps(target, tdir):
        out = real(target, tdir)
        for s in out:
            s["command"] = s["command"] + [str(tdir / "obj" / "missing.o")]
        return out
    return steps


# --- the no-op stamp (minibuild/stamp.py): a second `minibuild` with no change ends at once

def _cli_build(models_dir, out, *extra):
    assert cli.main(["--models", str(models_dir), "--out", str(out), "--abi", toolchain.host_abi(), *extra]) == 0


def _stamp_of(models_dir, out, *extra):
    """The stamp the command line checks for these arguments."""
    from minibuild.options import Options, parse_fix_dims
    fix = [extra[i + 1] for i, a in enumerate(extra) if a == "--fix-dim"]
    opts = Options(models=Path(models_dir), out=Path(out), platforms=["linux"], abis=[toolchain.host_abi()],
                   fixed_dims=parse_fix_dims(fix or None), messages="--no-messages" not in extra)
    return cli._stamp([opts], Path(out) / "build")


def test_no_op_stamp_skips_the_build_and_any_change_undoes_it(classifier_dir, tmp_path, capsys, monkeypatch):
    from minibuild import resources, stamp as stamp_mod
    site = tmp_path / "site-packages"      # stands for the venv's: pip adds and renames folders in it
    site.mkdir()
    monkeypatch.setattr(stamp_mod, "_site_dirs", lambda: [str(site)])
    models_dir = tmp_path / "models"
    shutil.copytree(classifier_dir, models_dir)
    out = tmp_path / "out"
    _cli_build(models_dir, out)
    capsys.readouterr()
    history = out / "size_history.sqlite"
    before = history.read_bytes()
    _cli_build(models_dir, out)
    err = capsys.readouterr().err
    assert "up to date: nothing changed" in err and " 0 action(s) run (" in err
    assert history.read_bytes() == before          # nothing ran: no size report, no history row
    st = _stamp_of(models_dir, out)
    assert st.up_to_date() is None

    def changed(why_part, undo):
        why = st.up_to_date()
        assert why is not None and why_part in why, why
        undo()
        assert st.up_to_date() is None

    # A touched model whose bytes are the same is still up to date; other bytes are not.
    model = models_dir / "small_classifier.onnx"
    data = model.read_bytes()
    os.utime(model, ns=(1, 1))
    assert st.up_to_date() is None
    model.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    changed("small_classifier.onnx changed", lambda: model.write_bytes(data))
    # A new model (or external data file) in the folder.
    (models_dir / "second.onnx").write_bytes(data)
    changed("added or removed", lambda: (models_dir / "second.onnx").unlink())
    # An option.
    assert _stamp_of(models_dir, out, "--no-messages").up_to_date() == "no stamp"
    # A registry file, a kernel source, a template, minibuild's own code: each is read by the check.
    for rel in ("ops_registry/Relu.yaml", "kernels_src/kernels/pool.c", "templates/registry.c.j2",
                "SConstruct"):
        f = resources.path(rel)
        assert str(f) in st.files or any(str(f).startswith(t + os.sep) for t in st.trees), rel
    trees = st.trees
    fake = tmp_path / "fake_kernels"
    fake.mkdir()
    (fake / "k.c").write_text("int k;\n")
    monkeypatch.setattr(stamp_mod, "_tool_inputs", lambda: (trees + [str(fake)], []))
    st2 = _stamp_of(models_dir, out)
    st2.write(st2.snapshot())
    assert st2.up_to_date() is None
    (fake / "k.c").write_text("int k2;\n")
    why = st2.up_to_date()
    assert why and "k.c changed" in why
    monkeypatch.setattr(stamp_mod, "_tool_inputs", lambda: (trees, []))
    st.write(st.snapshot())      # st2 shares st's key, so it took st's file
    # The toolchain or any Python package installed or upgraded (zig comes from ziglang's wheel).
    mtime = site.stat().st_mtime_ns
    (site / "ziglang-0.99.dist-info").mkdir()
    os.utime(site, ns=(mtime + 10**9, mtime + 10**9))
    assert st.up_to_date() == "Python, its packages or the JDK changed"
    # An output removed or changed: the build runs again and puts it back.
    (site / "ziglang-0.99.dist-info").rmdir()
    os.utime(site, ns=(mtime, mtime))
    assert st.up_to_date() is None
    lib = out / "linux" / toolchain.host_abi() / "lib" / "libminirt.so"
    lib.unlink()
    assert st.up_to_date() == "an output was changed or removed"
    _cli_build(models_dir, out)
    assert lib.is_file() and "up to date: nothing changed" not in capsys.readouterr().err
    # A real model change through the command line rebuilds.
    _save(_elementwise_model(), models_dir, "extra")
    capsys.readouterr()
    _cli_build(models_dir, out)
    err = capsys.readouterr().err
    assert "up to date: nothing changed" not in err and (out / "models" / "extra.mrt").is_file()
    _cli_build(models_dir, out)
    assert "up to date: nothing changed" in capsys.readouterr().err

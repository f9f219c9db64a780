"""The registry's schema: the one-type form, the type-family form (type signatures
over every type constraint), instantiation per type / size / any, and the errors a
kernel author gets for a bad entry."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from minibuild import build, registry as registry_mod
from minibuild.errors import RegistryError
from minibuild.manifest import Entry, Manifest

ROOT = Path(registry_mod.resources.path("ops_registry"))


def _registry(tmp_path: Path, entries: dict) -> registry_mod.Registry:
    """A registry of the given op entries, with the real support units and sources."""
    root = tmp_path / "ops_registry"
    shutil.copytree(ROOT / "support", root / "support")
    shutil.copytree(ROOT.parent / "kernels_src", tmp_path / "kernels_src")
    for name, doc in entries.items():
        (root / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return registry_mod.load(root)


def _family(**extra) -> dict:
    doc = {"op": "Gather", "domain": "ai.onnx", "versions": [1, 13], "source": "kernels/shape.c",
           "type_constraints": {"T": "input 0", "Tind": "input 1"},
           "symbols": {"prepare": "mrt_gather_prepare", "run": "mrt_gather_run"},
           "types": {"T": ["float32", "int64", "float64"], "Tind": ["int32", "int64"]}}
    doc.update(extra)
    return doc


def test_family_serves_every_combination_with_instantiated_symbols(tmp_path):
    e = _registry(tmp_path, {"Gather": _family()}).get("ai.onnx", "Gather")
    assert e.type_constraint == "T,Tind"
    assert e.constraints == (("T", ("input", 0)), ("Tind", ("input", 1)))
    assert sorted(e.kernels) == sorted(f"{t},{i}" for t in ("float32", "int64", "float64") for i in ("int32", "int64"))
    k = e.kernels["float32,int64"]
    assert (k.prepare, k.run) == ("mrt_gather_prepare__float32_int64", "mrt_gather_run__float32_int64")
    assert registry_mod.signature_key(k.types) == 0x0701  # float32 (1) low byte, int64 (7) next


def test_explicit_signatures(tmp_path):
    doc = _family(signatures=[["float32", "int64"], ["int64", "int64"]])
    del doc["types"]
    e = _registry(tmp_path, {"Gather": doc}).get("ai.onnx", "Gather")
    assert sorted(e.kernels) == ["float32,int64", "int64,int64"]


def test_instantiate_by_size_shares_one_object_between_same_size_types(tmp_path):
    reg = _registry(tmp_path, {"Gather": _family(instantiate={"T": "size"})})
    e = reg.get("ai.onnx", "Gather")
    assert e.kernels["int64,int64"].suffix == e.kernels["float64,int64"].suffix == "uint64_int64"
    assert e.kernels["float32,int32"].suffix == "uint32_int32"
    manifest = Manifest([], [Entry("ai.onnx", "Gather", 13, "T,Tind", ["float64,int64", "int64,int64", "float32,int64"])])
    units = build.kernel_units(reg, manifest)
    assert [u["target"] for u in units] == ["obj/kernels/Gather__uint32_int64.o", "obj/kernels/Gather__uint64_int64.o"]
    d = units[1]["defines"]
    assert "MRT_T0=uint64_t" in d and "MRT_T1=int64_t" in d and "MRT_KERNEL_SUFFIX=__uint64_int64" in d
    assert "MRT_T0_DTYPE=MRT_DTYPE_UINT64" in d and "MRT_OP_Gather=1" in d


def test_instantiate_any_compiles_one_object(tmp_path):
    reg = _registry(tmp_path, {"Gather": _family(instantiate="any")})
    manifest = Manifest([], [Entry("ai.onnx", "Gather", 13, "T,Tind", ["float64,int64", "int64,int32"])])
    units = build.kernel_units(reg, manifest)
    assert len(units) == 1 and units[0]["target"] == "obj/kernels/Gather__any_any.o"
    assert not any(d.startswith("MRT_T0=") for d in units[0]["defines"])


def test_one_type_form_keeps_its_symbols(tmp_path):
    e = registry_mod.load().get("ai.onnx", "Conv")
    k = e.kernels["float32"]
    assert not k.family and k.prepare == "mrt_conv_prepare_f32" and k.suffix == "float32"
    assert build.kernel_defines("Conv", k) == ["MRT_OP_Conv=1", "MRT_TYPE_float32=1"]


@pytest.mark.parametrize("change,message", [
    ({"types": {"T": ["float32", "complex64"], "Tind": ["int64"]}}, "unknown element type 'complex64'"),
    ({"types": {"T": ["float32"]}}, "types must list the element types of each constraint: T, Tind"),
    ({"symbols": {"prepare": "mrt gather", "run": "x"}}, "symbols must be"),
    ({"type_constraints": {"T": "input zero"}}, "must be 'input N' or 'output N'"),
    ({"instantiate": "by-magic"}, "instantiate must be one of type, size, any"),
    ({"type_from": "input 0"}, "not both"),
    ({"signatures": [["float32"]]}, "signatures must be a list of [T, Tind] type lists"),
])
def test_bad_family_entries_name_the_file_and_the_fix(tmp_path, change, message):
    with pytest.raises(RegistryError) as err:
        _registry(tmp_path, {"Gather": _family(**change)})
    assert "Gather.yaml" in str(err.value) and message in str(err.value)

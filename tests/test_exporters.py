"""Models from the exporters our users use, end to end: torch.onnx.export (the
TorchScript exporter and the default dynamo one, whose weights go to NAME.onnx.data),
torchvision CNNs and segmenters, transformers encoders from small configs with
random weights. Each family's models are built together for linux (host ABI), as a
user's folder would be; each model's outputs must then match onnxruntime's on the
same seeded inputs within 1e-4 of the output's range (max - min).

A model the build cannot take (a missing kernel, a scan or shape failure) is left
out of its family's build so the others still build, and its own test fails with
the build's message. Exports are cached across sessions (tests/exporters.py);
`MINIBUILD_EXPORT_CACHE` moves the cache. test-artifacts/exporters.json records
the matrix: per model, the error and range of each output, or what stopped it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import exporters as ex

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from minibuild import manifest as manifest_mod, registry as registry_mod, scan, toolchain  # noqa: E402
from minibuild.errors import MinibuildError  # noqa: E402
from minibuild.pipeline import Options, run_build  # noqa: E402
from minibuild.verify import import_minirt  # noqa: E402

SEED = 7


class Families:
    """Runs each family once per session: export (cached), select each model on
    its own, build the selectable ones in one build."""

    def __init__(self, work: Path, cache: Path):
        self.work, self.cache = work, cache
        self.runs: dict[str, ex.FamilyRun] = {}
        self.skipped: dict[str, str] = {}
        self.results: dict[str, dict] = {}
        self.registry = registry_mod.load()

    def get(self, family: str) -> ex.FamilyRun:
        if family not in self.runs:
            self.runs[family] = self._run(family)
        return self.runs[family]

    def _run(self, family: str) -> ex.FamilyRun:
        folder = self.work / family / "models"
        folder.mkdir(parents=True)
        run = ex.FamilyRun(folder=folder)
        for spec in ex.specs(family):
            missing = ex.missing_modules(spec)
            if missing:
                self.skipped[spec.name] = f"needs {', '.join(missing)}"
                continue
            try:
                src, seconds = ex.export_cached(spec, self.cache)
            except Exception as e:
                run.errors[spec.name] = f"export failed: {type(e).__name__}: {e}"
                continue
            run.export_seconds[spec.name] = seconds
            for f in ex.model_files(src, spec.name):
                shutil.copyfile(f, folder / f.name)
            run.errors.update(self._select(folder / f"{spec.name}.onnx", folder, family))
        ok = self.work / family / "buildable"
        ok.mkdir()
        names = [s.name for s in ex.specs(family) if s.name in run.export_seconds and s.name not in run.errors]
        for name in names:
            for f in ex.model_files(folder, name):
                shutil.copyfile(f, ok / f.name)
        run.out = self.work / family / "out"
        if names:
            t0 = time.monotonic()
            try:
                run.build = run_build(Options(models=ok, out=run.out, platforms=["linux"], abis=[toolchain.host_abi()],
                                              fixed_dims=self.fixed_dims(family)))
            except MinibuildError as e:
                run.build_error = f"{type(e).__name__}: {e}"
            run.build_seconds = time.monotonic() - t0
        return run

    @staticmethod
    def fixed_dims(family: str) -> dict:
        """The family build's --fix-dim values: every dynamic dim its models name."""
        return {k: v for s in ex.specs(family) for k, v in s.fixed_dims().items()}

    def _select(self, path: Path, root: Path, family: str) -> dict:
        """What stops one model alone: its scan (load, optimise, static shapes) or
        select (every missing kernel at once). {} when it would build."""
        try:
            sm = scan.scan_model(path, self.registry, fixed_dims=self.fixed_dims(family), root=root)
            manifest_mod.select(self.registry, [sm], scan.needs(sm, self.registry))
        except MinibuildError as e:
            return {path.stem: f"{type(e).__name__}: {e}"}
        return {}


@pytest.fixture(scope="session")
def families(tmp_path_factory, artifacts_dir):
    cache = Path(os.environ.get("MINIBUILD_EXPORT_CACHE") or tmp_path_factory.getbasetemp().parent / "minibuild-exports")
    fam = Families(tmp_path_factory.mktemp("exporters"), cache)
    yield fam
    doc = {"cache_key": ex.cache_key(), "rel_to_range": ex.REL_TO_RANGE, "skipped": fam.skipped,
           "families": {name: {"export_seconds": r.export_seconds, "errors": r.errors, "build_error": r.build_error,
                               "build_seconds": r.build_seconds} for name, r in fam.runs.items()},
           "models": fam.results}
    (artifacts_dir / "exporters.json").write_text(json.dumps(doc, indent=2, default=str))


def _run_both(spec: ex.ModelSpec, run: ex.FamilyRun):
    minirt = import_minirt(run.out)
    feeds = spec.feeds(np.random.default_rng(SEED))
    sess = minirt.InferenceSession(str(run.build.model_files[spec.name]))
    names = [o.name for o in sess.get_outputs()]
    assert sorted(i.name for i in sess.get_inputs()) == sorted(feeds), "the model's inputs are not the spec's"
    got = sess.run(None, feeds)
    sess.close()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref_sess = ort.InferenceSession(str(run.folder / f"{spec.name}.onnx"), so, providers=["CPUExecutionProvider"])
    ref = ref_sess.run(names, {k: v for k, v in feeds.items() if k in {i.name for i in ref_sess.get_inputs()}})
    return ex.compare_outputs(names, got, ref)


def _check(families: Families, name: str):
    spec = ex.SPECS[name]
    missing = ex.missing_modules(spec)
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}")
    run = families.get(spec.family)
    if name in run.errors:
        families.results[name] = {"status": "not built", "error": run.errors[name]}
        pytest.fail(f"{name} ({spec.family}) does not build:\n{run.errors[name]}", pytrace=False)
    if run.build_error:
        families.results[name] = {"status": "family build failed", "error": run.build_error}
        pytest.fail(f"{spec.family} build failed:\n{run.build_error}", pytrace=False)
    results = _run_both(spec, run)
    families.results[name] = {"status": "ok" if all(r.ok for r in results) else "mismatch",
                              "outputs": [{"name": r.name, "shape": list(r.shape), "max_abs_err": r.max_abs_err,
                                           "range": r.range, "err_over_range": r.rel} for r in results]}
    bad = [f"{r.name} {list(r.shape)}: max abs err {r.max_abs_err:.3g} = {r.rel:.3g} x range {r.range:.3g}"
           for r in results if not r.ok]
    assert not bad, f"{name}: minirt differs from onnxruntime beyond {ex.REL_TO_RANGE:g} x range:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", [s.name for s in ex.specs(ex.CNN)])
def test_cnn_matches_onnxruntime(families, name):
    _check(families, name)


@pytest.mark.parametrize("name", [s.name for s in ex.specs(ex.TRANSFORMER)])
def test_transformer_matches_onnxruntime(families, name):
    _check(families, name)


@pytest.mark.parametrize("name", [s.name for s in ex.specs(ex.DYNAMO)])
def test_dynamo_export_matches_onnxruntime(families, name):
    _check(families, name)


def test_dynamo_exports_write_external_data_at_opset_18_plus(families):
    """The default exporter's files are what the dynamo tests claim to cover: weights
    in NAME.onnx.data beside the model, an ai.onnx opset of 18 or newer."""
    import onnx
    run = families.get(ex.DYNAMO)
    exported = [s for s in ex.specs(ex.DYNAMO) if s.name in run.export_seconds]
    if not exported:
        pytest.skip("no dynamo export: " + "; ".join(run.errors.get(s.name, families.skipped.get(s.name, "?"))
                                                      for s in ex.specs(ex.DYNAMO)))
    for spec in exported:
        path = run.folder / f"{spec.name}.onnx"
        assert (run.folder / f"{spec.name}.onnx.data").is_file(), spec.name
        model = onnx.load(str(path), load_external_data=False)
        assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 18, spec.name
        external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external, f"{spec.name}: no initializer stored externally"


def test_exported_id_gathers_and_same_type_casts_fold_away(families):
    """What exporters write around the real work goes at build time: BERT's
    position / token-type ids (GatherElements over a 128-long constant buffer, then
    Expand) fold to constants, and wav2vec2's float-to-float Cast is dropped, so the
    manifest asks for neither."""
    run = families.get(ex.TRANSFORMER)
    if run.build is None:
        pytest.skip(f"no transformer build: {run.build_error or run.errors}")
    ops = {m.name: {n.op_type for n in m.graph.nodes} for m in run.build.scan.models}
    if "bert_small" in ops:
        assert not ops["bert_small"] & {"GatherElements", "Range"}, ops["bert_small"]
    if "wav2vec2_small" in ops:
        g = next(m.graph for m in run.build.scan.models if m.name == "wav2vec2_small")
        assert not [n.name for n in g.nodes if n.op_type == "Cast" and g.value_info[n.input[0]][0] == 1
                    and next(a.i for a in n.attribute if a.name == "to") == 1]

"""The workspace file (`minibuild.yaml`): named targets, each a model set with its
platforms and options, built together with `minibuild build [NAME...]`.

    out: minibuild-out               # output root, relative to this file; each target in OUT/<name>/
    targets:
      app-android:
        models: models/              # a folder, or a glob (models/*.onnx), relative to this file
        platforms: [android]
        abis: [arm64-v8a, armeabi-v7a]
        size_budget: 120000
      app-linux:
        models: models/
        platforms: [linux]

Every build option of the command line has a key (README, docs/workspace.md); the
file is checked against SCHEMA before anything is scanned, and each error names the
file and the key. All requested targets compile in one SCons run (one build graph,
one -j), and each is packaged and reported into its own folder.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml

from .errors import MinibuildError
from .options import TUNES, Options

FILE_NAME = "minibuild.yaml"

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["models"],
    "properties": {
        "models": {"type": "string", "minLength": 1,
                   "description": "a folder of .onnx models, or a glob, relative to the workspace file"},
        "platforms": {"type": "array", "minItems": 1, "uniqueItems": True,
                      "items": {"enum": ["linux", "android", "ios", "python", "all"]}},
        "abis": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "minLength": 1}},
        "size_budget": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "minLength": 1}],
                        "description": "bytes for all libraries, or a YAML file of limits relative to the workspace"},
        "size_baseline": {"type": "string"},
        "size_history": {"type": "string"},
        "fix_dims": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
        "input_shapes": {"type": "object",
                         "additionalProperties": {"type": "array", "minItems": 1,
                                                  "items": {"type": "integer", "minimum": 0}}},
        "messages": {"type": "boolean", "description": "false: compile error messages out (as --no-messages)"},
        "threads": {"type": "boolean", "description": "false: no thread pool, no pthreads (as --no-threads)"},
        "tune": {"enum": list(TUNES), "description": "speed (default) or size (as --tune; size leaves the thread pool "
                 "out unless threads: true)"},
        "package_version": {"type": "string", "minLength": 1},
        "android_name": {"type": "string", "minLength": 1},
        "android_package": {"type": "string", "minLength": 1},
        "android_prefab": {"enum": ["separate", "bundled", "none"]},
    },
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "minibuild workspace",
    "type": "object",
    "additionalProperties": False,
    "required": ["targets"],
    "properties": {
        "out": {"type": "string", "minLength": 1},
        "jobs": {"type": "integer", "minimum": 1},
        "targets": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": _NAME},
                    "additionalProperties": _TARGET},
    },
}


@dataclass
class Workspace:
    path: Path                     # the workspace file
    out: Path                      # output root
    targets: dict[str, Options]    # name -> the target's build options, in file order

    def select(self, names: list[str]) -> dict[str, Options]:
        if not names:
            return dict(self.targets)
        unknown = [n for n in names if n not in self.targets]
        if unknown:
            raise MinibuildError(f"{self.path}: no target {', '.join(unknown)}; targets: {', '.join(self.targets)}")
        return {n: self.targets[n] for n in names}


def _key(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def find(explicit: Path | None = None, cwd: Path | None = None) -> Path | None:
    """--workspace FILE, else ./minibuild.yaml if there is one."""
    if explicit is not None:
        if not Path(explicit).is_file():
            raise MinibuildError(f"--workspace {explicit}: no such file")
        return Path(explicit)
    here = Path(cwd or Path.cwd()) / FILE_NAME
    return here if here.is_file() else None


def _models(root: Path, spec: str, where: str) -> tuple[Path, list[Path] | None]:
    """(models folder, model files): a folder as it is; a glob as the folder that holds
    every match (external data resolves inside it) and the matches themselves."""
    path = root / spec
    if not glob.has_magic(spec):
        if not path.is_dir():
            raise MinibuildError(f"{where}: {spec!r} is not a folder (looked for {path})")
        return path, None
    matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if p.endswith(".onnx"))
    if not matches:
        raise MinibuildError(f"{where}: the glob {spec!r} matches no .onnx file (looked in {root})")
    common = matches[0].parent
    while not all(common == m.parent or common in m.parents for m in matches):
        common = common.parent
    return common, matches


def load(path: Path) -> Workspace:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise MinibuildError(f"{path}: not valid YAML: {e}") from None
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc if doc is not None else {}),
                    key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"{path}: {len(errors)} problem(s):"]
        lines += [f"  {_key(e.absolute_path)}: {e.message}" for e in errors]
        raise MinibuildError("\n".join(lines))
    root = path.resolve().parent
    out = root / doc.get("out", "minibuild-out")
    targets = {}
    for name, t in doc["targets"].items():
        where = f"{path}: targets.{name}.models"
        budget = t.get("size_budget")
        if isinstance(budget, str) and not budget.isdigit():
            budget = str(root / budget)
        models_dir, files = _models(root, t["models"], where)
        targets[name] = Options(
            models=models_dir, model_files=files, out=out / name,
            platforms=list(t.get("platforms", ["linux"])), abis=t.get("abis"),
            fixed_dims=dict(t.get("fix_dims", {})),
            input_shapes={k: tuple(v) for k, v in t.get("input_shapes", {}).items()},
            jobs=doc.get("jobs"), messages=t.get("messages", True), threads=t.get("threads"),
            tune=t.get("tune", "speed"),
            package_version=t.get("package_version", "0.1.0"),
            android_name=t.get("android_name", "minirt"), android_package=t.get("android_package", "ai.minibuild.minirt"),
            android_prefab=t.get("android_prefab", "separate"),
            size_budget=None if budget is None else str(budget),
            size_baseline=root / t["size_baseline"] if "size_baseline" in t else None,
            size_history=root / t["size_history"] if "size_history" in t else None,
        )
    return Workspace(path, out, targets)

"""Binary wheels (PEP 427 / PEP 491) written directly: a zip with the package files,
then `<name>-<version>.dist-info/{METADATA, WHEEL, RECORD}`. Reproducible: entries
sorted, dated 1980-01-01 (archive.zip_bytes), no build timestamps anywhere."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field

from . import __version__, actions, archive


@dataclass
class WheelSpec:
    name: str                         # distribution name, e.g. "minirt"
    version: str
    platform_tags: list[str]          # e.g. ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    python_tag: str = "py3"
    abi_tag: str = "none"
    summary: str = ""
    requires_dist: list[str] = field(default_factory=list)
    requires_python: str | None = None
    license: str | None = None
    keywords: list[str] = field(default_factory=list)
    description: str = ""             # the long description (Markdown), METADATA body

    @property
    def dist_name(self) -> str:
        """The escaped name used in file names (PEP 427: runs of -_. become _)."""
        return re.sub(r"[-_.]+", "_", self.name)

    @property
    def tag(self) -> str:
        return f"{self.python_tag}-{self.abi_tag}-{'.'.join(self.platform_tags)}"

    @property
    def filename(self) -> str:
        return f"{self.dist_name}-{self.version}-{self.tag}.whl"

    @property
    def dist_info(self) -> str:
        return f"{self.dist_name}-{self.version}.dist-info"


def record_hash(data: bytes) -> str:
    """sha256=<urlsafe base64 without padding>, RECORD's form."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(spec: WheelSpec) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    if spec.summary:
        lines.append(f"Summary: {spec.summary}")
    if spec.keywords:
        lines.append(f"Keywords: {','.join(spec.keywords)}")
    if spec.license:
        lines.append(f"License: {spec.license}")
    if spec.requires_python:
        lines.append(f"Requires-Python: {spec.requires_python}")
    lines += [f"Requires-Dist: {r}" for r in spec.requires_dist]
    if spec.description:
        lines.append("Description-Content-Type: text/markdown")
    text = "\n".join(lines) + "\n"
    if spec.description:
        text += "\n" + spec.description.rstrip("\n") + "\n"
    return text


def wheel_file(spec: WheelSpec) -> str:
    lines = ["Wheel-Version: 1.0", f"Generator: minibuild {__version__}",
             "Root-Is-Purelib: false" if spec.platform_tags != ["any"] else "Root-Is-Purelib: true"]
    lines += [f"Tag: {spec.python_tag}-{spec.abi_tag}-{p}" for p in spec.platform_tags]
    return "\n".join(lines) + "\n"


def build(spec: WheelSpec, files: dict[str, bytes], executable=()) -> bytes:
    """The wheel's bytes. `files`: {path inside the wheel (e.g. 'minirt/__init__.py'): bytes}."""
    if any(n.startswith(spec.dist_info + "/") for n in files):
        raise ValueError(f"{spec.dist_info}/ is written by the wheel builder")
    contents = dict(files)
    contents[f"{spec.dist_info}/METADATA"] = metadata(spec).encode()
    contents[f"{spec.dist_info}/WHEEL"] = wheel_file(spec).encode()
    record_name = f"{spec.dist_info}/RECORD"
    rows = [f"{name},{record_hash(data)},{len(data)}" for name, data in sorted(contents.items())]
    rows.append(f"{record_name},,")
    contents[record_name] = ("\n".join(rows) + "\n").encode()
    # dist-info last, as installers expect (PEP 427 recommends it); within each
    # part, names sorted.
    order = sorted(n for n in contents if not n.startswith(spec.dist_info + "/"))
    order += sorted(n for n in contents if n.startswith(spec.dist_info + "/"))
    return actions.archive(f"{spec.dist_info[:-len('.dist-info')]}.whl", archive.zip_bytes,
                           {n: contents[n] for n in order}, directories=False, executable=executable,
                           sorted_entries=False)

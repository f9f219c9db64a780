"""One exception type per failure class; each message names the file, node, op and the fix."""


class MinibuildError(Exception):
    """Base class: the CLI prints the message and exits non-zero (no traceback)."""

    exit_code = 1


class ModelError(MinibuildError):
    """A model cannot be read, optimised or given static shapes."""


class RegistryError(MinibuildError):
    """An ops_registry/ file breaks the schema (a bug in minibuild's data)."""


class UnsupportedOpsError(MinibuildError):
    """The manifest asks for (op, opset, type) entries no kernel serves."""

    def __init__(self, missing):
        self.missing = missing
        lines = [
            f"{len(missing)} operator use(s) have no kernel in ops_registry/; "
            "nothing was compiled. Remove or replace these nodes, or add kernels:"
        ]
        for m in missing:
            lines.append(f"  - {m}")
        super().__init__("\n".join(lines))


class BuildError(MinibuildError):
    """The compile/link step failed."""


class VerifyError(MinibuildError):
    """minirt's outputs differ from onnxruntime's beyond the tolerance."""

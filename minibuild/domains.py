"""Operator domains and their two spellings.

ONNX protobufs spell the default domain "" (node.domain, opset_import); minibuild's
registry, manifest and reports spell it "ai.onnx". Every conversion goes through
these two functions, so the spelling can never differ between two places."""

ONNX = "ai.onnx"
MINIBUILD = "ai.minibuild"   # minibuild's fused operators (FusedConv, FusedGemm, ...)
MICROSOFT = "com.microsoft"  # onnxruntime's contrib operators (QOperator-form int8: QLinearAdd, QGemm, ...)


def canonical(domain: str | None) -> str:
    """"" (ONNX's default) -> "ai.onnx"; any other domain as it is."""
    return domain or ONNX


def proto(domain: str | None) -> str:
    """"ai.onnx" -> "" as ONNX protobufs and the compact model format store it."""
    return "" if domain in (None, "", ONNX) else domain


def qualified(domain: str | None, op: str) -> str:
    """"Conv" for the default domain, "ai.minibuild.FusedConv" otherwise (object and file names)."""
    d = proto(domain)
    return f"{d}.{op}" if d else op

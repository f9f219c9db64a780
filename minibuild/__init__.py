"""minibuild: a folder of ONNX models in, the smallest runtime that runs exactly them out."""

__version__ = "0.1.0"

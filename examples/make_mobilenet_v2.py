"""Write MobileNetV2 (torchvision's architecture as torch.onnx.export writes it at
opset 13, BatchNorm folded, seeded random weights) to a folder:

    python examples/make_mobilenet_v2.py models/
"""

import os
import sys

import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import models  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "models"
os.makedirs(out, exist_ok=True)
onnx.save(models.mobilenet_v2(), os.path.join(out, "mobilenet_v2.onnx"))
print(os.path.join(out, "mobilenet_v2.onnx"))

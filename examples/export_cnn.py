"""export_cnn.py OUT: export a small seeded CNN to OUT/net.onnx with an input
and PyTorch's output as .npy files (used by demo.sh)."""
import os
import sys

import numpy as np
import torch
from torch import nn

out = sys.argv[1]
torch.manual_seed(0)
net = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(16, 10)).eval()
x = torch.rand(2, 1, 28, 28)
with torch.no_grad():
    y = net(x)
torch.onnx.export(net, x, os.path.join(out, "net.onnx"), input_names=["input"],
                  output_names=["logits"], opset_version=13,
                  dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
np.save(os.path.join(out, "input.npy"), x.numpy())
np.save(os.path.join(out, "torch_logits.npy"), y.numpy())

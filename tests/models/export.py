#!/usr/bin/python3
# export.py: export real networks from PyTorch to ONNX for the model tests
# and the benchmark: seeded random weights (weights=None, never a download),
# eval mode, batch 1, with a random input and PyTorch's output as .npy.
# Usage: export.py [-o DIR] [--force] [NAME...]; writes DIR/NAME/model.onnx,
# DIR/NAME/input.npy, DIR/NAME/output.npy and DIR/NAME/info.json, and skips
# a model whose files exist and were made by this same script.
import argparse
import hashlib
import inspect
import json
import os
import sys
import warnings

import numpy as np
import torch
import torchvision

SEED = 20240601


def cnn(ctor, size=224):
    def make():
        return ctor(weights=None), (1, 3, size, size)
    return make


class Encoder(torch.nn.Module):
    """A 2-layer transformer encoder, d_model 64, batch first, and a linear head."""

    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                 dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.enc(x))


class Recurrent(torch.nn.Module):
    """An LSTM or GRU over a sequence, then a linear layer on the last step."""

    def __init__(self, kind):
        super().__init__()
        rnn = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        self.rnn = rnn(input_size=32, hidden_size=48, num_layers=1, batch_first=True)
        self.fc = torch.nn.Linear(48, 10)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class MLP(torch.nn.Module):
    """The README's Fashion-MNIST MLP: 784-256-128-10 with ReLU."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
            torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


class LeNet(torch.nn.Module):
    """LeNet-5 on 28x28 grey images (padding 2 on the first conv), max pooling."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))

    def forward(self, x):
        return self.head(self.features(x))


def small(cls, shape):
    def make():
        return cls(), shape
    return make


def seq(cls, *args):
    def make():
        return cls(*args), (1, 16, 32) if cls is Recurrent else (1, 12, 64)
    return make


tv = torchvision.models
# name: (constructor, opset)
MODELS = {
    "resnet18": (cnn(tv.resnet18), 14),
    "mobilenet_v2": (cnn(tv.mobilenet_v2), 13),
    "squeezenet1_1": (cnn(tv.squeezenet1_1), 11),
    "efficientnet_b0": (cnn(tv.efficientnet_b0), 14),
    "densenet121": (cnn(tv.densenet121, 64), 14),
    "transformer": (seq(Encoder), 14),
    "transformer_op17": (seq(Encoder), 17),
    "lstm": (seq(Recurrent, "lstm"), 14),
    # mlopt's tests and benchmark (tests/9110-models-opt.bats, bench_opt.py): ConvNeXt
    # at 64x64, which keeps every layer (LayerNorm, GELU, layer scale) and runs fast
    "convnext_tiny": (cnn(tv.convnext_tiny, 64), 14),
    "gru": (seq(Recurrent, "gru"), 14),
    # the rest of the benchmark's 11-model set (tests/bench/bench.py)
    "shufflenet_v2": (cnn(tv.shufflenet_v2_x1_0), 14),
    "mlp": (small(MLP, (1, 784)), 14),
    "lenet": (small(LeNet, (1, 1, 28, 28)), 14),
}


def calibrate(model, shape):
    """
    Set the batch-norm statistics from a forward pass in training mode on
    random data: with the initial statistics (mean 0, variance 1) the
    activations of some networks shrink to 1e-14 at the output, where any
    tolerance would pass any result.
    """
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    gen = torch.Generator().manual_seed(SEED + 1)
    model.train()
    with torch.no_grad():
        model(torch.randn((4,) + tuple(shape[1:]), generator=gen))


def script_hash():
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def export(name, out, stamp, force):
    ctor, opset = MODELS[name]
    d = os.path.join(out, name)
    info_path = os.path.join(d, "info.json")
    try:
        with open(info_path) as f:
            if force:
                raise OSError
            if json.load(f).get("stamp") == stamp:
                print("%s: up to date" % name)
                return
    except (OSError, ValueError):
        pass
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(SEED)
    model, shape = ctor()
    calibrate(model, shape)
    model.eval()
    x = torch.from_numpy(np.random.default_rng(SEED).standard_normal(shape).astype(np.float32))
    with torch.no_grad():
        y = model(x)
    tmp = os.path.join(d, "model.onnx.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the TorchScript exporter: newer PyTorch (a GPU machine's 2.x) defaults to dynamo
        kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters \
            else {}
        torch.onnx.export(model, (x,), tmp, opset_version=opset, input_names=["input"],
                          output_names=["output"], do_constant_folding=True, **kw)
    os.replace(tmp, os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "input.npy"), x.numpy())
    np.save(os.path.join(d, "output.npy"), y.numpy())
    params = sum(p.numel() for p in model.parameters())
    with open(info_path + ".tmp", "w") as f:
        json.dump({"stamp": stamp, "opset": opset, "input_shape": list(shape),
                   "output_shape": list(y.shape), "params": params}, f)
    os.replace(info_path + ".tmp", info_path)
    print("%s: exported (opset %d, %d parameters)" % (name, opset, params))


def main():
    ap = argparse.ArgumentParser(description="export the test models from PyTorch")
    ap.add_argument("-o", "--dir", default="build/models")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    if a.list:
        print("\n".join(MODELS))
        return 0
    for n in a.names:
        if n not in MODELS:
            print("export.py: unknown model '%s'" % n, file=sys.stderr)
            return 2
    torch.set_num_threads(2)
    for n in a.names or MODELS:
        export(n, a.dir, script_hash(), a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())

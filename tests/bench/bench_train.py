#!/usr/bin/python3
# bench_train.py: training on Fashion-MNIST, mltrain against PyTorch 1.13 in
# the same run, on one thread: the MLP 784-256-128-10 for 5 epochs and a
# LeNet-style CNN for 1 epoch, from the same initial weights (the PyTorch
# model is exported to ONNX with its initialisation and mltrain trains that
# file), with the same hyperparameters (batch 64, SGD lr 0.05 momentum 0.9,
# pixels / 255) and the same data order (mltrain's seeded reshuffle of each
# epoch, recomputed here, the last partial batch kept). Prints test accuracy and training
# samples/s of both and the ratios against the targets (accuracy at least
# PyTorch's - 0.5 points, speed at least 1.5x). Each model is trained from
# several seeds (seed s: torch.manual_seed(s) initial weights, data order
# of --seed s, for both frameworks alike) and the mean accuracies are
# compared; the per-seed rows are printed too, and the standard error of
# the mean difference. Speed compares each framework's best seed (the
# least disturbed by other load).
#
# mltrain flushes subnormal floats to zero by default (FTZ/DAZ; PyTorch
# leaves them unless torch.set_flush_denormal(True)): the comparison is of
# the two tools as they come, and a reference row trains PyTorch's seed 0
# again with flushing on.
#
# Why many seeds for LeNet: one step of both frameworks agrees to 1e-7
# (tests/test_train checks the rules; the weights after 1, 20 or 300 steps
# from the same start were compared by hand), but at lr 0.05 and momentum
# 0.9 a ReLU that flips on a rounding difference makes the two runs part
# within about 40 steps, and after one epoch a seed's accuracy is a draw
# with a spread of about 1.1 points. PyTorch against itself (initial
# weights scaled by 1 + 1e-6 noise, or 2 threads instead of 1) moves by
# as much: up to 2 points for one seed, 0.44 points in the mean of 12
# seeds. Three seeds cannot resolve the 0.5-point target; 20 seeds give a
# standard error of about 0.35. The MLP after 5 epochs moves by about 0.3
# points, and 3 seeds do. --seeds N sets both. Both run on --threads threads (PyTorch's
# intra-op threads, mltrain's kernels and BLAS); mltrain's loader prepares
# the next batch on a thread of its own, PyTorch indexes the batch inline.
# Where an OpenCL device exists, seed 0 is trained again with --device cl and
# its accuracy compared with the CPU's (target: within 0.5 points).
# Usage: bench_train.py --bin DIR --work DIR [--models DIR] [--ort-python PY]
#        [--data DIR] [--epochs-mlp N] [--epochs-cnn N] [--threads N] [--seeds N]
#        [--only mlp|lenet]
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with open(path, "rb") as f:
        b = f.read()
    if b[:2] == b"\x1f\x8b":
        b = gzip.decompress(b)
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b[4 + 4 * nd:], dtype=np.uint8).reshape(dims)


def load(data):
    def f(prefix, what):
        for name in os.listdir(data):
            if name.startswith(prefix + "-" + what):
                return os.path.join(data, name)
        raise SystemExit("bench_train: no %s-%s file in %s" % (prefix, what, data))
    xtr = read_idx(f("train", "images"))
    ytr = read_idx(f("train", "labels"))
    xte = read_idx(f("t10k", "images"))
    yte = read_idx(f("t10k", "labels"))
    return xtr, ytr, xte, yte


M64 = (1 << 64) - 1


def ml_shuffle(n, seed, epoch):
    """mltrain's permutation of epoch (lib/data/loader.c ml_shuffle), so both
    frameworks see the same batches and differ only in their arithmetic."""
    sm = (seed ^ (epoch * 0xD1342543DE82EF95)) & M64
    s = []
    for _ in range(4):
        sm = (sm + 0x9E3779B97F4A7C15) & M64
        z = sm
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        s.append(z ^ (z >> 31))

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def xnext():
        r = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return r

    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        b = i + 1
        m = xnext() * b
        lo = m & M64
        if lo < b:
            t = ((1 << 64) - b) % b
            while lo < t:
                m = xnext() * b
                lo = m & M64
        j = m >> 64
        perm[i], perm[j] = perm[j], perm[i]
    return torch.tensor(perm, dtype=torch.int64)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                         nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def torch_train(model, xtr, ytr, xte, yte, epochs, batch, lr, momentum, seed):
    """Train in place; (test accuracy, training samples/s)."""
    x = torch.from_numpy(xtr.astype(np.float32)).div(255.0).unsqueeze(1)
    y = torch.from_numpy(ytr.astype(np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    lossf = nn.CrossEntropyLoss()
    n = x.shape[0]
    secs = 0.0
    seen = 0
    model.train()
    for ep in range(epochs):
        perm = ml_shuffle(n, seed, ep)
        t0 = time.perf_counter()
        for s in range(0, n, batch):
            idx = perm[s:s + batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            seen += idx.shape[0]
        secs += time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        xt = torch.from_numpy(xte.astype(np.float32)).div(255.0).unsqueeze(1)
        pred = model(xt).argmax(1).numpy()
    return float((pred == yte).mean()), seen / secs


def run_mltrain(mltrain, onnx_path, a, epochs, seed, out, extra=()):
    """mltrain on onnx_path with the bench's hyperparameters; the finished process."""
    cmd = [mltrain, onnx_path, "--data", a.data, "--loss", "softmax-cross-entropy",
           "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--batch", "64",
           "--epochs", str(epochs), "--seed", str(seed), "--threads", str(a.threads),
           "-q", "--json", "-o", out] + list(extra)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def has_cl(bindir):
    """Whether mlrun --devices lists an OpenCL device."""
    p = subprocess.run([os.path.join(bindir, "mlrun"), "--devices", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        return p.returncode == 0 and any(d.get("id", "").startswith("cl")
                                         for d in json.loads(p.stdout).get("devices", []))
    except (ValueError, AttributeError):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models")
    ap.add_argument("--ort-python")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs-mlp", type=int, default=5)
    ap.add_argument("--epochs-cnn", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seeds", type=int, help="seeds per model (default: MLP 3, LeNet 20)")
    ap.add_argument("--only", choices=["mlp", "lenet"])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if not os.path.isdir(a.data):
        print("bench_train: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist); skipped"
              % a.data)
        return 0
    torch.set_num_threads(a.threads)
    xtr, ytr, xte, yte = load(a.data)
    mltrain = os.path.join(a.bin, "mltrain")
    cases = [("mlp", mlp, a.epochs_mlp, a.seeds or 3, (0.5, 1.5)),
             ("lenet", lenet, a.epochs_cnn, a.seeds or 20, (0.5, 1.5))]
    fails = 0
    print("%-6s %6s | %9s %11s | %9s %11s | %8s %7s" %
          ("model", "epochs", "torch acc", "torch smp/s", "ml acc", "ml smp/s", "acc diff",
           "speed x"))
    for name, make, epochs, nseeds, (tol, speed) in cases:
        if a.only and a.only != name:
            continue
        rows = []
        for seed in range(nseeds):
            torch.manual_seed(seed)
            model = make()
            onnx_path = os.path.join(a.work, "train-%s-%d.onnx" % (name, seed))
            torch.onnx.export(model, torch.zeros(1, 1, 28, 28), onnx_path, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                              opset_version=13)
            t_acc, t_sps = torch_train(model, xtr, ytr, xte, yte, epochs, 64, 0.05, 0.9, seed)
            out = os.path.join(a.work, "train-%s-%d.mlg" % (name, seed))
            p = run_mltrain(mltrain, onnx_path, a, epochs, seed, out)
            if p.returncode != 0:
                print("%-6s mltrain failed (status %d): %s" % (name, p.returncode,
                                                              p.stderr.strip()))
                fails += 1
                break
            r = json.loads(p.stdout)
            m_acc, m_sps = r["test_accuracy"], r["train_samples_per_s"]
            rows.append((t_acc, t_sps, m_acc, m_sps))
            print("%-6s %6d | %8.2f%% %11.0f | %8.2f%% %11.0f | %+7.2f %6.2fx   (seed %d)" %
                  (name, epochs, 100 * t_acc, t_sps, 100 * m_acc, m_sps, 100 * (m_acc - t_acc),
                   m_sps / t_sps, seed))
            sys.stdout.flush()
        if len(rows) != nseeds or not rows:
            continue
        # accuracy: the mean over seeds; speed: each framework's best seed (the run least
        # disturbed by other load on the machine; the two take turns, seed by seed)
        t_acc, m_acc = (sum(r[i] for r in rows) / len(rows) for i in (0, 2))
        t_sps, m_sps = (max(r[i] for r in rows) for i in (1, 3))
        diff = 100 * (m_acc - t_acc)
        ratio = m_sps / t_sps
        d = [100 * (r[2] - r[0]) for r in rows]
        se = (np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        print("%-6s %6d | %8.2f%% %11.0f | %8.2f%% %11.0f | %+7.2f %6.2fx   "
              "(%d seeds: mean accuracy, best speed; standard error of the difference %.2f)" %
              (name, epochs, 100 * t_acc, t_sps, 100 * m_acc, m_sps, diff, ratio, len(rows), se))
        ok_acc = diff >= -tol
        ok_speed = ratio >= speed
        print("%-6s targets: accuracy >= torch - %.1f points: %s; speed >= %.1fx: %s" %
              (name, tol, "met" if ok_acc else "MISSED", speed, "met" if ok_speed else "MISSED"))
        # mltrain flushes subnormals to zero (its --keep-denormals keeps them), PyTorch by
        # default does not: seed 0 again with torch.set_flush_denormal(True), for reference
        if torch.set_flush_denormal(True):
            torch.manual_seed(0)
            _, f_sps = torch_train(make(), xtr, ytr, xte, yte, epochs, 64, 0.05, 0.9, 0)
            torch.set_flush_denormal(False)
            print("%-6s reference: torch with set_flush_denormal(True), seed 0: %.0f samples/s "
                  "(ml best %.0f: %.2fx)" % (name, f_sps, m_sps, m_sps / f_sps))
        # the issue: training with --device cl reaches the CPU's accuracy within 0.5
        # points; each seed again on the first OpenCL device, where there is one, and
        # the means compared (one seed's accuracy moves by a point with rounding alone)
        if has_cl(a.bin):
            cl_acc = []
            for seed in range(nseeds):
                out = os.path.join(a.work, "train-%s-%d-cl.mlg" % (name, seed))
                p = run_mltrain(mltrain, os.path.join(a.work, "train-%s-%d.onnx" % (name, seed)),
                                a, epochs, seed, out, ["--device", "cl"])
                if p.returncode != 0:
                    print("%-6s mltrain --device cl failed (status %d): %s" %
                          (name, p.returncode, p.stderr.strip()))
                    fails += 1
                    break
                cl_acc.append(json.loads(p.stdout)["test_accuracy"])
            if len(cl_acc) == len(rows):
                c_acc = sum(cl_acc) / len(cl_acc)
                cdiff = 100 * (c_acc - m_acc)
                print("%-6s --device cl: %.2f%% vs cpu %.2f%% (%+.2f points, %d seeds: %s); "
                      "target |diff| <= 0.5: %s" %
                      (name, 100 * c_acc, 100 * m_acc, cdiff, len(cl_acc),
                       " ".join("%.2f" % (100 * x) for x in cl_acc),
                       "met" if abs(cdiff) <= 0.5 else "MISSED"))
        else:
            print("%-6s --device cl: no OpenCL device, not measured" % name)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

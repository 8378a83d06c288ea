#!/usr/bin/python3
# bench_quant.py: mlquant's "done means" in one run: int8 against fp32
# latency (mlrun, batch 1, 2 threads) and file size on ResNet-18 and
# MobileNet-V2; Fashion-MNIST MLP and CNN accuracy in fp32 and int8 (the
# MLP and LeNet of examples/, trained here by mltrain for 2 epochs); the QDQ export checked by onnx.checker and run in ONNX Runtime
# against mlrun. Called by tests/bench/run.sh; prints tables, writes
# WORK/bench_quant.json. Targets: latency ratio <= 0.5 (ResNet-18,
# MobileNet-V2), every model no slower in int8, size ratio <= 0.3, accuracy
# loss <= 0.3 points.
# Usage: bench_quant.py --bin DIR --work DIR --models DIR [--ort-python PY] [--repeat N]
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def latency(binp, model, inp, repeat):
    r = run([os.path.join(binp, "mlrun"), model, "-i", "%s=%s" % inp, "--repeat", str(repeat),
             "--warmup", "3", "--threads", "2", "--json"])
    return json.loads(r.stdout)["latency_ms"]["median"]


def latency_pair(binp, f32, q8, inp, repeat, rounds=5):
    """fp32 and int8 medians, measured in alternating rounds so that a change
    of load on the machine falls on both alike; the median of the rounds."""
    t32, t8 = [], []
    for _ in range(rounds):
        t32.append(latency(binp, f32, inp, repeat))
        t8.append(latency(binp, q8, inp, repeat))
    return statistics.median(t32), statistics.median(t8)


def outputs(binp, model, feeds, outdir):
    cmd = [os.path.join(binp, "mlrun"), model, "--threads", "2", "-o", outdir]
    for k, v in feeds.items():
        cmd += ["-i", "%s=%s" % (k, v)]
    run(cmd)
    return {f[:-4]: np.load(os.path.join(outdir, f)) for f in os.listdir(outdir)}


def sqnr(a, b):
    n = float(((a - b) ** 2).sum())
    return 10 * np.log10(float((a ** 2).sum()) / n) if n > 0 else 99.0


def input_name(onnx_path):
    import onnx
    m = onnx.load(onnx_path)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits][0]


def zoo(a, res):
    print("%-14s %9s %9s %7s %11s %11s %7s %9s" % ("model", "fp32 ms", "int8 ms", "ratio",
                                                   "fp32 bytes", "int8 bytes", "size", "SQNR dB"))
    for name in ["resnet18", "mobilenet_v2"]:
        d = os.path.join(a.models, name)
        onnx_path = os.path.join(d, "model.onnx")
        if not os.path.exists(onnx_path):
            print("%-14s (no model in %s)" % (name, d))
            continue
        w = os.path.join(a.work, name)
        os.makedirs(w, exist_ok=True)
        f32 = os.path.join(w, "f32.mlg")
        q8 = os.path.join(w, "int8.mlg")
        run([os.path.join(a.bin, "mlconvert"), onnx_path, "-o", f32])
        x = np.load(os.path.join(d, "input.npy"))
        rs = np.random.RandomState(0)
        cal = np.concatenate([x + 0.25 * rs.randn(*x.shape).astype(np.float32) for _ in range(8)])
        np.save(os.path.join(w, "cal.npy"), cal.astype(np.float32))
        run([os.path.join(a.bin, "mlquant"), "-c", os.path.join(w, "cal.npy"), f32, "-o", q8])
        iname = input_name(onnx_path)
        inp = (iname, os.path.join(d, "input.npy"))
        t32, t8 = latency_pair(a.bin, f32, q8, inp, a.repeat)
        o32 = outputs(a.bin, f32, {iname: inp[1]}, os.path.join(w, "o32"))
        o8 = outputs(a.bin, q8, {iname: inp[1]}, os.path.join(w, "o8"))
        k = sorted(o32)[0]
        s32, s8 = os.path.getsize(f32), os.path.getsize(q8)
        r = {"fp32_ms": t32, "int8_ms": t8, "latency_ratio": t8 / t32, "fp32_bytes": s32,
             "int8_bytes": s8, "size_ratio": s8 / s32, "sqnr_db": sqnr(o32[k], o8[k]),
             "top1_agree": bool(o32[k].argmax() == o8[k].argmax())}
        res[name] = r
        print("%-14s %9.2f %9.2f %7.3f %11d %11d %7.3f %9.1f" % (
            name, t32, t8, r["latency_ratio"], s32, s8, r["size_ratio"], r["sqnr_db"]))


def idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def fashion(a, res):
    if not os.path.isdir(DATA):
        print("fashion-mnist: no data in %s, skipped" % DATA)
        return
    xtr = idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255
    xte = idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255
    yte = idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    xtr, xte = xtr[:, None], xte[:, None]
    # the models of examples/, trained by mltrain (Adam, 2 epochs) on the IDX files
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    nets = {"fmnist_mlp": os.path.join(ex, "fashion-mlp.mlt"),
            "fmnist_cnn": os.path.join(ex, "lenet.mlt")}
    print("%-12s %9s %9s %9s %9s %9s" % ("model", "fp32 acc", "int8 acc", "loss pts",
                                         "fp32 ms", "int8 ms"))
    for name, src in nets.items():
        w = os.path.join(a.work, name)
        os.makedirs(w, exist_ok=True)
        f32 = os.path.join(w, "f32.mlg")
        run([os.path.join(a.bin, "mltrain"), src, "--data", DATA, "-o", f32, "--optimizer",
             "adam", "--lr", "0.001", "--batch", "128", "--epochs", "2", "--threads", "2",
             "-q"])
        np.save(os.path.join(w, "cal.npy"), xtr[:512])
        np.save(os.path.join(w, "test.npy"), xte)
        np.save(os.path.join(w, "x1.npy"), xte[:1])
        q8 = os.path.join(w, "int8.mlg")
        run([os.path.join(a.bin, "mlquant"), "-c", os.path.join(w, "cal.npy"), f32, "-o", q8])
        acc = {}
        for tag, m in (("f32", f32), ("int8", q8)):
            o = outputs(a.bin, m, {"x": os.path.join(w, "test.npy")}, os.path.join(w, "o" + tag))
            acc[tag] = float((o["y"].argmax(1) == yte).mean() * 100)
        t32, t8 = latency_pair(a.bin, f32, q8, ("x", os.path.join(w, "x1.npy")), a.repeat * 5)
        r = {"fp32_acc": acc["f32"], "int8_acc": acc["int8"], "loss_points": acc["f32"] - acc["int8"],
             "fp32_ms": t32, "int8_ms": t8, "latency_ratio": t8 / t32,
             "size_ratio": os.path.getsize(q8) / os.path.getsize(f32)}
        res[name] = r
        print("%-12s %9.2f %9.2f %9.2f %9.3f %9.3f" % (name, acc["f32"], acc["int8"],
                                                     r["loss_points"], t32, t8))


def qdq(a, res):
    import onnx
    d = os.path.join(a.models, "resnet18")
    if not os.path.exists(os.path.join(d, "model.onnx")):
        return
    w = os.path.join(a.work, "resnet18")
    q = os.path.join(w, "qdq.mlg")
    qo = os.path.join(w, "qdq.onnx")
    run([os.path.join(a.bin, "mlquant"), "--qdq", "-c", os.path.join(w, "cal.npy"),
         os.path.join(w, "f32.mlg"), "-o", q])
    run([os.path.join(a.bin, "mlconvert"), q, "-o", qo])
    r = {"checker": "ok"}
    try:
        onnx.checker.check_model(onnx.load(qo))
    except Exception as ex:  # noqa: BLE001 - report whatever the checker says
        r["checker"] = str(ex).splitlines()[0]
    iname = input_name(os.path.join(d, "model.onnx"))
    mine = outputs(a.bin, q, {iname: os.path.join(d, "input.npy")}, os.path.join(w, "oqdq"))
    k = sorted(mine)[0]
    if a.ort_python:
        code = ("import sys,numpy as np,onnxruntime as ort\n"
                "s=ort.InferenceSession(sys.argv[1],providers=['CPUExecutionProvider'])\n"
                "o=s.run(None,{s.get_inputs()[0].name:np.load(sys.argv[2])})[0]\n"
                "np.save(sys.argv[3],o)\n")
        try:
            run([a.ort_python, "-c", code, qo, os.path.join(d, "input.npy"),
                 os.path.join(w, "ort.npy")])
            o = np.load(os.path.join(w, "ort.npy"))
            r["ort_vs_mlrun_sqnr_db"] = sqnr(o, mine[k])
            r["ort_vs_mlrun_max_abs"] = float(np.abs(o - mine[k]).max())
        except subprocess.CalledProcessError as ex:
            r["ort"] = "failed: " + ex.stderr.strip().splitlines()[-1]
    else:
        r["ort"] = "no onnxruntime"
    res["qdq_resnet18"] = r
    print("QDQ ResNet-18: onnx.checker %s; %s" % (
        r["checker"], "ORT vs mlrun SQNR %.1f dB, max |diff| %.3g" % (
            r["ort_vs_mlrun_sqnr_db"], r["ort_vs_mlrun_max_abs"])
        if "ort_vs_mlrun_sqnr_db" in r else r.get("ort")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--ort-python")
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    a.work = os.path.join(a.work, "quant")
    os.makedirs(a.work, exist_ok=True)
    res = {}
    zoo(a, res)
    fashion(a, res)
    qdq(a, res)
    ok = True
    print("targets:")
    for k in ("resnet18", "mobilenet_v2"):
        if k in res:
            t = res[k]["latency_ratio"] <= 0.5
            ok &= t
            print("  %-14s latency ratio %.3f <= 0.5: %s" % (k, res[k]["latency_ratio"],
                                                           "yes" if t else "NO"))
    for k, r in res.items():
        if "latency_ratio" in r:
            t = r["latency_ratio"] <= 1.0
            ok &= t
            print("  %-14s no slower in int8 (%.3f): %s" % (k, r["latency_ratio"], "yes" if t else "NO"))
        if "size_ratio" in r:
            t = r["size_ratio"] <= 0.3
            ok &= t
            print("  %-14s size ratio %.3f <= 0.3: %s" % (k, r["size_ratio"], "yes" if t else "NO"))
        if "loss_points" in r:
            t = r["loss_points"] <= 0.3
            ok &= t
            print("  %-14s accuracy loss %.2f <= 0.3 points: %s" % (k, r["loss_points"],
                                                                  "yes" if t else "NO"))
    if "qdq_resnet18" in res:
        t = res["qdq_resnet18"]["checker"] == "ok"
        ok &= t
        print("  QDQ export passes onnx.checker: %s" % ("yes" if t else "NO"))
    with open(os.path.join(a.work, "bench_quant.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# bench_quant.py: mlquant's "done means" in one run: int8 against fp32
# latency (mlrun, batch 1, 2 threads) and file size on ResNet-18 and
# MobileNet-V2; Fashion-MNIST MLP and CNN accuracy in fp32 and int8 (the
# MLP and LeNet of examples/, trained here by mltrain for 2 epochs); the QDQ export checked by onnx.checker and run in ONNX Runtime
# against mlrun. Called by tests/bench/run.sh; prints tables, writes
# WORK/bench_quant.json. Targets: latency ratio <= 0.5 and top-1 agreement
# >= 0.98 (ResNet-18, MobileNet-V2, the encoder), every model no slower in
# int8, size ratio <= 0.3, accuracy loss <= 0.3 points.
# The bf16 table (--only bf16): mlquant --dtype bf16 of the -O2 model against
# it, the fallback (ML_BF16=f32) and mlquant --dtype fp16 of the same model (never
# slower than fp32: its products read fp16 weights converted once); target
# ratio <= 0.6 where the CPU has
# AVX512_BF16, top-1 agreement >= 0.98.
# The zoo table: int8 against fp32 on ResNet-18, MobileNet-V2 and the encoder,
# ours and ORT's int8 (quantize_static) in the same interleaved rounds, with
# the CPU, the load average and top-1 agreement on 50 random inputs; and
# under each model mlquant --reduce-range's (7-bit weights, which AVX2 CPUs
# without VNNI multiply with vpmaddubsw: about twice the exact path's speed
# there, for the accuracy shown), not part of the targets.
# Usage: bench_quant.py --bin DIR --work DIR --models DIR [--ort-python PY]
#        [--ort-path DIR] [--repeat N] [--rounds N] [--only zoo|fashion|qdq|bf16]
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


def latency(binp, model, inp, repeat, env=None):
    r = run([os.path.join(binp, "mlrun"), model, "-i", "%s=%s" % inp, "--repeat", str(repeat),
             "--warmup", "3", "--threads", "2", "--json"],
            env=dict(os.environ, **env) if env else None)
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


ORT_WORKER = r"""
import json, sys, time, numpy as np, onnxruntime as ort
cmd = sys.argv[1]
so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.inter_op_num_threads = 1
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
if cmd == "quantize":
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    src, dst, cal = sys.argv[2], sys.argv[3], np.load(sys.argv[4])
    name = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).get_inputs()[0].name
    class R(CalibrationDataReader):
        def __init__(s):
            s.it = iter([{name: cal[i:i + 1]} for i in range(len(cal))])
        def get_next(s):
            return next(s.it, None)
    quantize_static(src, dst, R(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
elif cmd == "time":
    # one round: the median of `repeat` runs of each model, fp32 first
    x, repeat, out = np.load(sys.argv[2]), int(sys.argv[3]), {}
    for tag, path in (("f32", sys.argv[4]), ("int8", sys.argv[5])):
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {s.get_inputs()[0].name: x}
        for _ in range(3):
            s.run(None, feed)
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            s.run(None, feed)
            t.append((time.perf_counter() - t0) * 1e3)
        out[tag] = sorted(t)[len(t) // 2]
    print(json.dumps(out))
elif cmd == "outputs":
    xs, res = np.load(sys.argv[2]), {}
    for tag, path in (("f32", sys.argv[4]), ("int8", sys.argv[5])):
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        n = s.get_inputs()[0].name
        res[tag] = np.stack([s.run(None, {n: xs[i:i + 1]})[0][0] for i in range(len(xs))])
    np.savez(sys.argv[3], **res)
"""


def ort_call(a, args):
    env = dict(os.environ)
    if a.ort_path:
        env["PYTHONPATH"] = a.ort_path + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return run([a.ort_python, "-c", ORT_WORKER] + args, env=env)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def cpu_name():
    isa = []
    name = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "?":
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    fl = line.split(":", 1)[1].split()
                    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
                           if f in fl]
                    break
    except OSError:
        pass
    return "%s (%s)" % (name, " ".join(isa))


def top1(y):
    """the top-1 index of each sample (and, for a sequence output, of each token)"""
    return y.reshape(-1, y.shape[-1]).argmax(-1)


def our_outputs(a, model, iname, xs, w, tag):
    """the first output of mlrun on each sample of xs (one run per sample: the zoo's
    models have a batch of 1)"""
    ys = []
    for i in range(len(xs)):
        np.save(os.path.join(w, "s.npy"), xs[i:i + 1])
        o = outputs(a.bin, model, {iname: os.path.join(w, "s.npy")},
                    os.path.join(w, "o%s%d" % (tag, i)))
        ys.append(o[sorted(o)[0]][0])
    return np.stack(ys)


def zoo(a, res):
    """int8 against fp32, ours (mlopt -O2, then mlquant static min-max) and ORT's
    (quantize_static, QDQ, per channel, on the same ONNX), timed in interleaved rounds
    (each round: mlrun fp32, mlrun int8, ORT fp32 and int8), the median of the round
    medians; top-1 agreement of int8 with fp32 on 50 random inputs."""
    print("CPU: %s; load average before: %s" % (cpu_name(), loadavg()))
    print("%-14s %8s %8s %6s %8s %8s %6s %6s %6s %8s %7s" % (
        "model", "fp32 ms", "int8 ms", "ratio", "ORT f32", "ORT int8", "ratio", "top1",
        "ORTtop1", "SQNR dB", "size"))
    for name in ["resnet18", "mobilenet_v2", "transformer"]:
        d = os.path.join(a.models, name)
        onnx_path = os.path.join(d, "model.onnx")
        if not os.path.exists(onnx_path):
            print("%-14s (no model in %s)" % (name, d))
            continue
        w = os.path.join(a.work, name)
        os.makedirs(w, exist_ok=True)
        f32 = os.path.join(w, "f32.mlg")
        q8 = os.path.join(w, "int8.mlg")
        run([os.path.join(a.bin, "mlopt"), "-O2", onnx_path, "-o", f32])
        x = np.load(os.path.join(d, "input.npy")).astype(np.float32)
        cal = np.random.RandomState(1).standard_normal((16,) + x.shape[1:]).astype(np.float32)
        xs = np.random.RandomState(2).standard_normal((50,) + x.shape[1:]).astype(np.float32)
        np.save(os.path.join(w, "cal.npy"), cal)
        np.save(os.path.join(w, "rand50.npy"), xs)
        run([os.path.join(a.bin, "mlquant"), "-c", os.path.join(w, "cal.npy"), f32, "-o", q8])
        # 7-bit weights: what AVX2 without VNNI runs at vpmaddubsw's speed
        q7 = os.path.join(w, "int8r7.mlg")
        run([os.path.join(a.bin, "mlquant"), "--reduce-range", "-c", os.path.join(w, "cal.npy"),
             f32, "-o", q7])
        iname = input_name(onnx_path)
        inp = (iname, os.path.join(d, "input.npy"))
        ortq = os.path.join(w, "ort_int8.onnx")
        ort_ok = False
        if a.ort_python:
            try:
                ort_call(a, ["quantize", onnx_path, ortq, os.path.join(w, "cal.npy")])
                ort_ok = True
            except subprocess.CalledProcessError as ex:
                print("%-14s ORT quantize_static failed: %s" % (
                    name, (ex.stderr.strip().splitlines() or ["?"])[-1]))
        t32, t8, t7, o32t, o8t = [], [], [], [], []
        reps = a.repeat * (20 if name == "transformer" else 1)
        for _ in range(a.rounds):
            t32.append(latency(a.bin, f32, inp, reps))
            t8.append(latency(a.bin, q8, inp, reps))
            t7.append(latency(a.bin, q7, inp, reps))
            if ort_ok:
                r = json.loads(ort_call(a, ["time", inp[1], str(reps), onnx_path, ortq]).stdout)
                o32t.append(r["f32"])
                o8t.append(r["int8"])
        y32 = our_outputs(a, f32, iname, xs, w, "f")
        y8 = our_outputs(a, q8, iname, xs, w, "q")
        y7 = our_outputs(a, q7, iname, xs, w, "r")
        r = {"fp32_ms": statistics.median(t32), "int8_ms": statistics.median(t8),
             "fp32_bytes": os.path.getsize(f32), "int8_bytes": os.path.getsize(q8),
             "sqnr_db": sqnr(y32, y8),
             "top1_agree": float((top1(y32) == top1(y8)).mean()),
             "rounds_fp32_ms": t32, "rounds_int8_ms": t8,
             "r7_ms": statistics.median(t7), "r7_sqnr_db": sqnr(y32, y7),
             "r7_top1_agree": float((top1(y32) == top1(y7)).mean()), "rounds_r7_ms": t7}
        r["r7_ratio"] = r["r7_ms"] / statistics.median(t32)
        r["latency_ratio"] = r["int8_ms"] / r["fp32_ms"]
        r["size_ratio"] = r["int8_bytes"] / r["fp32_bytes"]
        if ort_ok:
            r["ort_fp32_ms"] = statistics.median(o32t)
            r["ort_int8_ms"] = statistics.median(o8t)
            r["ort_ratio"] = r["ort_int8_ms"] / r["ort_fp32_ms"]
            ort_call(a, ["outputs", os.path.join(w, "rand50.npy"), os.path.join(w, "ort.npz"),
                         onnx_path, ortq])
            z = np.load(os.path.join(w, "ort.npz"))
            r["ort_top1_agree"] = float((top1(z["f32"]) == top1(z["int8"])).mean())
        res[name] = r
        na = "%8s" % "-"
        print("%-14s %8.3f %8.3f %6.3f %s %s %6s %6.3f %6s %8.1f %7.3f" % (
            name, r["fp32_ms"], r["int8_ms"], r["latency_ratio"],
            "%8.3f" % r["ort_fp32_ms"] if ort_ok else na,
            "%8.3f" % r["ort_int8_ms"] if ort_ok else na,
            "%6.3f" % r["ort_ratio"] if ort_ok else "-", r["top1_agree"],
            "%6.3f" % r["ort_top1_agree"] if ort_ok else "-", r["sqnr_db"], r["size_ratio"]))
        print("%-14s %8s %8.3f %6.3f %8s %8s %6s %6.3f %6s %8.1f   (7-bit weights, --reduce-range)" % (
            "", "", r["r7_ms"], r["r7_ratio"], "", "", "", r["r7_top1_agree"], "",
            r["r7_sqnr_db"]))
    print("load average after: %s" % loadavg())


def has_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return any(l.startswith("flags") and "avx512_bf16" in l.split() for l in f)
    except OSError:
        return False


def bf16(a, res):
    """bf16 against fp32: mlopt -O2, then mlquant --dtype bf16 of that model, against the
    -O2 model; rounds interleaved (fp32, bf16, bf16 with ML_BF16=f32: the fallback that
    converts the weights to f32 once; and mlquant --dtype fp16 of the same model, whose
    products convert their fp16 weights once), the median of the round medians; top-1
    agreement with fp32 on 50 random inputs."""
    print("CPU: %s; load average before: %s" % (cpu_name(), loadavg()))
    print("%-14s %8s %8s %6s %9s %6s %6s %8s %7s %8s %6s" % (
        "model", "fp32 ms", "bf16 ms", "ratio", "fallback", "ratio", "top1", "SQNR dB", "size",
        "fp16 ms", "ratio"))
    for name in ["resnet18", "mobilenet_v2"]:
        d = os.path.join(a.models, name)
        onnx_path = os.path.join(d, "model.onnx")
        if not os.path.exists(onnx_path):
            print("%-14s (no model in %s)" % (name, d))
            continue
        w = os.path.join(a.work, name)
        os.makedirs(w, exist_ok=True)
        f32 = os.path.join(w, "f32.mlg")
        bf = os.path.join(w, "bf16.mlg")
        run([os.path.join(a.bin, "mlopt"), "-O2", onnx_path, "-o", f32])
        run([os.path.join(a.bin, "mlquant"), "--dtype", "bf16", f32, "-o", bf])
        h16 = os.path.join(w, "fp16.mlg")
        run([os.path.join(a.bin, "mlquant"), "--dtype", "fp16", f32, "-o", h16])
        x = np.load(os.path.join(d, "input.npy")).astype(np.float32)
        xs = np.random.RandomState(2).standard_normal((50,) + x.shape[1:]).astype(np.float32)
        iname = input_name(onnx_path)
        inp = (iname, os.path.join(d, "input.npy"))
        t32, tb, tf, th = [], [], [], []
        for _ in range(a.rounds):
            t32.append(latency(a.bin, f32, inp, a.repeat))
            tb.append(latency(a.bin, bf, inp, a.repeat))
            tf.append(latency(a.bin, bf, inp, a.repeat, {"ML_BF16": "f32"}))
            th.append(latency(a.bin, h16, inp, a.repeat))
        y32 = our_outputs(a, f32, iname, xs, w, "f")
        yb = our_outputs(a, bf, iname, xs, w, "b")
        r = {"fp32_ms": statistics.median(t32), "bf16_ms": statistics.median(tb),
             "fallback_ms": statistics.median(tf), "sqnr_db": sqnr(y32, yb),
             "top1_agree": float((top1(y32) == top1(yb)).mean()),
             "bf16_size_ratio": os.path.getsize(bf) / os.path.getsize(f32),
             "fp16_ms": statistics.median(th),
             "rounds_fp32_ms": t32, "rounds_bf16_ms": tb, "rounds_fallback_ms": tf,
             "rounds_fp16_ms": th}
        r["fp16_ratio"] = r["fp16_ms"] / r["fp32_ms"]
        r["bf16_ratio"] = r["bf16_ms"] / r["fp32_ms"]
        r["fallback_ratio"] = r["fallback_ms"] / r["fp32_ms"]
        # how this CPU runs the bf16 products (AMX, vdpbf16ps, or f32), as mlrun -v says
        note = [l.split(": ", 1)[1] for l in
                run([os.path.join(a.bin, "mlrun"), bf, "-i", "%s=%s" % inp, "-v", "-o",
                     os.path.join(w, "vout")]).stderr.splitlines()
                if l.startswith("mlrun: ") and "bf16" in l]
        r["bf16_path"] = note[0] if note else "?"
        res["bf16_" + name] = r
        print("%-14s %8.3f %8.3f %6.3f %9.3f %6.3f %6.3f %8.1f %7.3f %8.3f %6.3f" % (
            name, r["fp32_ms"], r["bf16_ms"], r["bf16_ratio"], r["fallback_ms"],
            r["fallback_ratio"], r["top1_agree"], r["sqnr_db"], r["bf16_size_ratio"],
            r["fp16_ms"], r["fp16_ratio"]))
        print("%-14s %s" % ("", r["bf16_path"]))
    print("load average after: %s" % loadavg())


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
         os.path.join(d, "model.onnx"), "-o", q])
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
    ap.add_argument("--ort-path", default=os.environ.get("ML_BENCH_ORT_PATH"),
                    help="prepended to PYTHONPATH for ORT (its quantization tools need "
                    "onnx >= 1.14 and ml_dtypes; default: $ML_BENCH_ORT_PATH, which "
                    "run.sh sets)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("zoo", "fashion", "qdq", "bf16"),
                    help="run only that part: the int8 against fp32 table, Fashion-MNIST "
                    "accuracy, the QDQ export, or bf16 against fp32")
    a = ap.parse_args()
    a.work = os.path.join(a.work, "quant")
    os.makedirs(a.work, exist_ok=True)
    res = {}
    if a.only in (None, "zoo"):
        zoo(a, res)
    if a.only in (None, "fashion"):
        fashion(a, res)
    if a.only in (None, "qdq"):
        qdq(a, res)
    if a.only in (None, "bf16"):
        bf16(a, res)
    ok = True
    print("targets:")
    for k in ("bf16_resnet18", "bf16_mobilenet_v2"):
        if k not in res:
            continue
        r = res[k]
        if has_bf16():
            t = r["bf16_ratio"] <= 0.6
            ok &= t
            print("  %-18s bf16 latency ratio %.3f <= 0.6 (AVX512_BF16): %s" % (
                k, r["bf16_ratio"], "yes" if t else "NO"))
        t = r["top1_agree"] >= 0.98
        ok &= t
        print("  %-18s bf16 top-1 agreement %.3f >= 0.98: %s" % (k, r["top1_agree"],
                                                              "yes" if t else "NO"))
        # fp16 is storage: never slower than fp32 (5% for the noise)
        t = r["fp16_ratio"] <= 1.05
        ok &= t
        print("  %-18s fp16 latency ratio %.3f <= 1.05: %s" % (k, r["fp16_ratio"],
                                                              "yes" if t else "NO"))
    for k in ("resnet18", "mobilenet_v2", "transformer"):
        if k in res:
            t = res[k]["latency_ratio"] <= 0.5
            ok &= t
            print("  %-14s latency ratio %.3f <= 0.5: %s" % (k, res[k]["latency_ratio"],
                                                           "yes" if t else "NO"))
            t = res[k]["top1_agree"] >= 0.98
            ok &= t
            print("  %-14s top-1 agreement %.3f >= 0.98: %s" % (k, res[k]["top1_agree"],
                                                              "yes" if t else "NO"))
            # not a target: the trade --reduce-range offers (AVX2 without VNNI)
            print("  %-14s (--reduce-range: latency ratio %.3f, top-1 agreement %.3f)" % (
                k, res[k]["r7_ratio"], res[k]["r7_top1_agree"]))
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

#!/usr/bin/python3
# mutate.py: write damaged copies of model and array files for the reader
# robustness tests (tests/0100-mutations.bats): truncations, bit flips and
# corrupted length fields, seeded, so a failure is reproducible.
# Usage: mutate.py FORMAT OUTDIR SRC... [--count N] [--seed S]
# FORMAT is mlg, onnx, mlt or npy. Writes OUTDIR/NNN.EXT and
# OUTDIR/manifest.tsv (file, source, kind, detail).
#
# Every mutation must make the file invalid, so that a reader that takes
# one is wrong, not lenient. Where a format cannot tell a change from an
# intact file, the change is not made:
# - bit flips avoid payload bytes (tensor data, strings, numbers): a
#   changed weight is a different valid model. In .mlg files every content
#   byte is checksummed, so flips go anywhere but the header's flags and
#   reserved words (mlg(5): readers ignore them) and the unused bit of the
#   zstd frame header descriptor (RFC 8878: decoders ignore it), and a flip
#   that zstd still decodes to the same content is dropped. In .npy files
#   they stay in the header, off the byte-order character ('<' and '='
#   both mean little-endian here). In ONNX files they hit the length
#   prefixes of nested messages, and in .mlt text punctuation outside
#   strings and type brackets.
# - a mutant that numpy (.npy) or onnx.checker (ONNX) still accepts is
#   dropped: it may be an intact file, as when a flip turns a separator
#   into white space or a length change drops an optional type.
# - truncations of ONNX stop inside a top-level field (a cut between
#   fields is a shorter valid message); of text, they remove more than
#   white space.
# - a corrupted length is always longer than the true one, or impossible.
import argparse
import os
import random
import re
import subprocess
import sys
import warnings


def varint(buf, i):
    """The varint at buf[i:]: (value, index after it); ValueError when malformed."""
    v = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[i]
        v |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            return v, i


def enc_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_fields(buf, start, end):
    """Top-level fields of a protobuf message in buf[start:end]:
    (field start, key end, value start, value end, wire type)."""
    i = start
    out = []
    while i < end:
        s = i
        key, i = varint(buf, i)
        wt = key & 7
        k_end = i
        if wt == 0:
            _, i = varint(buf, i)
            out.append((s, k_end, k_end, i, wt))
        elif wt == 1:
            i += 8
            out.append((s, k_end, k_end, i, wt))
        elif wt == 5:
            i += 4
            out.append((s, k_end, k_end, i, wt))
        elif wt == 2:
            n, vs = varint(buf, i)
            i = vs + n
            out.append((s, k_end, vs, i, wt))
        else:
            raise ValueError("unsupported wire type %d" % wt)
        if i > end:
            raise ValueError("field past the end")
    return out


def pb_nested_lengths(buf, start, end, depth=0, out=None):
    """Length prefixes of every length-delimited field that parses as a
    nested message: (prefix start, prefix end, length, depth). Strings and
    bytes that happen to parse as messages are included; they are
    harmless, since a changed length prefix moves every later field."""
    if out is None:
        out = []
    try:
        fields = pb_fields(buf, start, end)
    except ValueError:
        return out
    for s, k_end, vs, ve, wt in fields:
        if wt != 2:
            continue
        out.append((k_end, vs, ve - vs, depth))
        if depth < 12 and ve - vs > 1:
            pb_nested_lengths(buf, vs, ve, depth + 1, out)
    return out


def flip(data, i, bit):
    d = bytearray(data)
    d[i] ^= 1 << bit
    return bytes(d)


# --- .npy ---------------------------------------------------------------

def npy_layout(data):
    major = data[6]
    if major == 1:
        hlen, off = int.from_bytes(data[8:10], "little"), 10
    else:
        hlen, off = int.from_bytes(data[8:12], "little"), 12
    return off, hlen


def npy_mutate(data, kind, rng):
    off, hlen = npy_layout(data)
    hdr = data[off:off + hlen]
    if kind == "trunc":
        k = rng.randrange(0, len(data))
        return data[:k], "cut at %d of %d" % (k, len(data))
    if kind == "flip":
        order = off + hdr.index(b"descr") + 5
        order = data.index(b"'", data.index(b":", order)) + 1
        while True:
            i = rng.randrange(0, off + hlen)
            if i != order:
                break
        bit = rng.randrange(8)
        return flip(data, i, bit), "bit %d of byte %d" % (bit, i)
    # length fields: the header length, or a dim of the shape
    if rng.random() < 0.5:
        width = 2 if off == 10 else 4
        while True:
            v = rng.choice([0, 1, hlen - 1, hlen + 1, hlen + 64, rng.randrange(1 << (8 * width))])
            if 0 <= v < (1 << (8 * width)) and v != hlen:
                break
        d = bytearray(data)
        d[8:8 + width] = v.to_bytes(width, "little")
        return bytes(d), "header length %d -> %d" % (hlen, v)
    text = hdr.decode("latin-1")
    s = text.index("(", text.index("shape")) + 1
    e = text.index(")", s)
    dims = [x.strip() for x in text[s:e].split(",") if x.strip()]
    big = rng.choice([2**31, 2**32 + 1, 2**62, 2**63 - 1, 10**19, 99999999999999999999])
    if dims:
        j = rng.randrange(len(dims))
        dims[j] = str(rng.choice([big, int(dims[j]) + 1, int(dims[j]) * 7 + 2]))
    else:
        dims = [str(big)]
    new = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    body = (text[:s - 1] + new + text[e + 1:]).rstrip(" \n")
    pad = hlen - len(body) - 1
    if pad < 0:
        return None, None
    nh = (body + " " * pad + "\n").encode("latin-1")
    return data[:off] + nh + data[off + hlen:], "shape -> %s" % new


# --- ONNX ---------------------------------------------------------------

def onnx_mutate(data, kind, rng):
    top = pb_fields(data, 0, len(data))
    bounds = {f[0] for f in top} | {len(data)}
    nested = pb_nested_lengths(data, 0, len(data))
    if kind == "trunc":
        while True:
            k = rng.randrange(0, len(data))
            if k not in bounds:
                return data[:k], "cut at %d of %d" % (k, len(data))
    ps, pe, n, depth = rng.choice(nested)
    if kind == "flip":
        i = rng.randrange(ps, pe)
        bit = rng.randrange(7 if i == pe - 1 else 8)
        return flip(data, i, bit), "bit %d of the length %d at %d (depth %d)" % (bit, n, ps, depth)
    v = rng.choice([n + 1, n + 2, n + 17, n + 1000, 2**31 - 1, 2**32 + n, 2**63 - 1])
    return data[:ps] + enc_varint(v) + data[pe:], "length %d at %d -> %d (depth %d)" % (n, ps, v, depth)


# --- .mlg ---------------------------------------------------------------

def zstd_frame(content):
    """A zstd frame of raw blocks holding content, with its size, no checksum."""
    n = len(content)
    if n < 256:
        fhd, fcs = 0x20, n.to_bytes(1, "little")
    elif n < 65536 + 256:
        fhd, fcs = 0x60, (n - 256).to_bytes(2, "little")
    else:
        fhd, fcs = 0xA0, n.to_bytes(4, "little")
    out = bytearray(b"\x28\xb5\x2f\xfd" + bytes([fhd]) + fcs)
    blocks = [content[i:i + 65536] for i in range(0, n, 65536)] or [b""]
    for j, b in enumerate(blocks):
        last = 1 if j == len(blocks) - 1 else 0
        out += (len(b) << 3 | last).to_bytes(3, "little") + b
    return bytes(out)


def mlg_content(data):
    """The frame content of a graph file, through the zstd command."""
    r = subprocess.run(["zstd", "-dqc"], input=data[16:], stdout=subprocess.PIPE, check=True)
    return r.stdout


def frame_header(data):
    """(descriptor offset, FCS offset, FCS size, first block offset) of the frame at 16."""
    fhd = data[20]
    single = (fhd >> 5) & 1
    did = [0, 1, 2, 4][fhd & 3]
    fcs = [1 if single else 0, 2, 4, 8][fhd >> 6]
    wd = 0 if single else 1
    fcs_off = 21 + wd + did
    return 20, fcs_off, fcs, fcs_off + fcs


def mlg_mutate(data, kind, rng):
    if kind == "trunc":
        k = rng.randrange(0, len(data))
        return data[:k], "cut at %d of %d" % (k, len(data))
    if kind == "flip":
        content = mlg_content(data)
        while True:
            i = rng.randrange(0, len(data))
            bit = rng.randrange(8)
            if (8 <= i < 16) or (i == 20 and bit == 4):
                continue
            mut = flip(data, i, bit)
            # zstd encodings are not unique: a flip that still gives the same content is no damage
            r = subprocess.run(["zstd", "-dqc"], input=mut[16:], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
            if i >= 16 and r.returncode == 0 and r.stdout == content:
                continue
            return mut, "bit %d of byte %d" % (bit, i)
    fhd, fcs_off, fcs, blk = frame_header(data)
    what = rng.randrange(4)
    if what == 0 and fcs > 0:
        # the frame's content size: any other value is wrong
        old = int.from_bytes(data[fcs_off:fcs_off + fcs], "little")
        while True:
            v = rng.choice([0, old + 1, old - 1, old * 2 + 1, rng.randrange(1 << (8 * fcs))])
            if 0 <= v < (1 << (8 * fcs)) and v != old:
                break
        d = bytearray(data)
        d[fcs_off:fcs_off + fcs] = v.to_bytes(fcs, "little")
        return bytes(d), "frame content size field %d -> %d" % (old, v)
    if what == 1:
        # the first block's size (21 bits after the last-block and type bits)
        h = int.from_bytes(data[blk:blk + 3], "little")
        size = h >> 3
        v = rng.choice([size + 1, size + 9, (1 << 21) - 1, size + rng.randrange(1, 4096)])
        v &= (1 << 21) - 1
        if v == size:
            v = size + 1
        d = bytearray(data)
        d[blk:blk + 3] = ((v << 3) | (h & 7)).to_bytes(3, "little")
        return bytes(d), "block size %d -> %d" % (size, v)
    content = mlg_content(data)
    mlen = int.from_bytes(content[:8], "little")
    if what == 2:
        # the graph message's own length, inside the frame
        v = rng.choice([mlen + 1, mlen + 8, len(content), 2**32 + mlen, 2**63, 2**64 - 1])
        c = v.to_bytes(8, "little") + content[8:]
        return data[:16] + zstd_frame(c), "message length %d -> %d" % (mlen, v)
    # a length prefix inside the graph message
    nested = pb_nested_lengths(content, 8, 8 + mlen)
    ps, pe, n, depth = rng.choice(nested)
    v = rng.choice([n + 1, n + 3, n + 100, 2**31, 2**40])
    msg = content[8:ps] + enc_varint(v) + content[pe:8 + mlen]
    c = len(msg).to_bytes(8, "little") + msg + content[8 + mlen:]
    return data[:16] + zstd_frame(c), "message field length %d at %d -> %d" % (n, ps - 8, v)


# --- .mlt ---------------------------------------------------------------

PUNCT = b"()[]{}<>,=:"


def mlt_spans(text):
    """Byte offsets of punctuation outside strings, base64 and comments, and
    outside the brackets of a type: there a flip can turn the comma of
    [N,3] into a letter, digit or '.', making one valid symbolic dim."""
    out = []
    i, n = 0, len(text)
    bracket = 0
    while i < n:
        c = text[i]
        if c == ord("["):
            bracket += 1
        elif c == ord("]"):
            bracket = max(0, bracket - 1)
        elif c == ord(",") and bracket:
            i += 1
            continue
        if c == ord("#"):
            while i < n and text[i] != ord("\n"):
                i += 1
            continue
        if c == ord('"'):
            i += 1
            while i < n and text[i] != ord('"'):
                i += 2 if text[i] == ord("\\") else 1
            i += 1
            continue
        if c in PUNCT:
            out.append(i)
        i += 1
    return out


def mlt_mutate(data, kind, rng):
    if kind == "trunc":
        while True:
            k = rng.randrange(0, len(data))
            if data[k:].strip():
                return data[:k], "cut at %d of %d" % (k, len(data))
    if kind == "flip":
        i = rng.choice(mlt_spans(data))
        bit = rng.randrange(8)
        return flip(data, i, bit), "bit %d of %r at %d" % (bit, chr(data[i]), i)
    # a declared dim of a tensor with data ("float[8] b1 = ..."): a count mismatch
    text = data.decode("latin-1")
    decls = [m.group(0) for m in re.finditer(r"^[a-z0-9]+\[[0-9,]+\] [^ =]+ = ", text, re.M)]
    line = rng.choice(decls)
    lb = line.index("[")
    rb = line.index("]")
    dims = line[lb + 1:rb].split(",")
    j = rng.randrange(len(dims))
    d = int(dims[j])
    dims[j] = str(rng.choice([d + 1, d * 3 + 1, d + rng.randrange(2, 10000), 2**40, 2**62 + 1]))
    new = line[:lb + 1] + ",".join(dims) + line[rb:]
    pos = text.index(line)
    out = text[:pos] + new + text[pos + len(line):]
    return out.encode("latin-1"), "declared %s -> %s" % (line[:rb + 1], new[:new.index("]") + 1])


MUTATORS = {"npy": npy_mutate, "onnx": onnx_mutate, "mlg": mlg_mutate, "mlt": mlt_mutate}


def accepted_elsewhere(fmt, data):
    """Whether the format's own reference reader takes the mutant: numpy for
    .npy, onnx.checker (with shape inference) for ONNX. Such a mutant may
    be a valid file, a whitespace or type annotation change, so it is not
    used."""
    import io
    if fmt == "npy":
        import numpy as np
        try:
            np.load(io.BytesIO(data), allow_pickle=False)
            return True
        except Exception:
            return False
    if fmt == "onnx":
        import onnx
        try:
            onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
            return True
        except Exception:
            return False
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("format", choices=sorted(MUTATORS))
    ap.add_argument("outdir")
    ap.add_argument("src", nargs="+")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    rng = random.Random(a.seed)
    os.makedirs(a.outdir, exist_ok=True)
    srcs = [(p, open(p, "rb").read()) for p in a.src]
    kinds = ["trunc", "flip", "length"]
    seen = set()
    rows = []
    tries = 0
    while len(rows) < a.count:
        tries += 1
        if tries > a.count * 50:
            sys.exit("mutate.py: cannot make %d distinct mutants" % a.count)
        path, data = srcs[len(rows) % len(srcs)]
        kind = kinds[len(rows) % len(kinds)]
        mut, detail = MUTATORS[a.format](data, kind, rng)
        if mut is None or mut == data or mut in seen or accepted_elsewhere(a.format, mut):
            continue
        seen.add(mut)
        name = "%03d.%s" % (len(rows), a.format)
        with open(os.path.join(a.outdir, name), "wb") as f:
            f.write(mut)
        rows.append((name, os.path.basename(path), kind, detail))
    with open(os.path.join(a.outdir, "manifest.tsv"), "w") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")


if __name__ == "__main__":
    main()

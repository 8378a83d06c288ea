#!/usr/bin/python3
# layers.py: check that lib/'s folders depend on each other one way only
# (DESIGN.md, "Layout"): an object of a lower layer never uses a symbol
# that only a higher layer defines. The layers, lowest first:
#   0 core    lib/*.c (IR, op registry, errors), lib/util/, lib/ops/ (op
#             definitions: schema, shapes, gradient rules)
#   1 devices lib/cpu/, lib/cl/ (kernels, the pool, scratch, device vtables)
#   2 exec    lib/exec/ (the executor, the planner, placement, profiling)
#   3 top     lib/fmt/, lib/opt/, lib/quant/, lib/train/, lib/data/, lib/dist/
# Reads the objects under BUILD/obj/lib with nm; prints each use that goes
# up ("lib/cpu/ctrl.o uses ml_session_run of lib/exec/session.o") and exits
# 1 when there is one, 0 when the arrows all point down. The generated
# protobuf code (BUILD/obj/gen) counts as core.
# Objects whose source is gone (a file that moved) are stale and skipped;
# sources are looked up under SRC (default: this repository).
# Usage: tools/layers.py [BUILD [SRC]]
import os
import subprocess
import sys

LAYERS = [("core", ["lib/", "lib/util/", "lib/ops/", "gen/"]),
          ("devices", ["lib/cpu/", "lib/cl/"]),
          ("exec", ["lib/exec/"]),
          ("top", ["lib/fmt/", "lib/opt/", "lib/quant/", "lib/train/", "lib/data/", "lib/dist/"])]


def layer_of(rel):
    """The layer index of an object path relative to BUILD/obj (lib/cpu/nn.o)."""
    folder = os.path.dirname(rel) + "/"
    for i, (_, folders) in enumerate(LAYERS):
        if folder in folders:
            return i
    return None


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    srcdir = sys.argv[2] if len(sys.argv) > 2 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.join(build, "obj")
    objs = []
    for sub in ("lib", "gen"):
        for d, _, files in os.walk(os.path.join(root, sub)):
            for f in files:
                o = os.path.join(d, f)
                rel = os.path.relpath(o, root)
                src = rel[:-2] + ".c"
                # an object whose source is gone (a moved file) is stale, not the library's
                if f.endswith(".o") and os.path.exists(os.path.join(build, src) if
                                                       sub == "gen" else
                                                       os.path.join(srcdir, src)):
                    objs.append(o)
    if not objs:
        print("layers: no objects under %s (make first)" % root, file=sys.stderr)
        return 2
    defined, used = {}, {}
    for o in sorted(objs):
        rel = os.path.relpath(o, root)
        lay = layer_of(rel)
        if lay is None:
            print("layers: %s is in no layer (add its folder to tools/layers.py)" % rel)
            return 1
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used.setdefault(rel, set()).add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRCV" and parts[1].isupper():
                defined[parts[2]] = rel
    bad = 0
    for rel in sorted(used):
        lay = layer_of(rel)
        for sym in sorted(used[rel]):
            where = defined.get(sym)
            if where is None:
                continue    # from a system library
            if layer_of(where) > lay:
                print("%s (%s) uses %s of %s (%s)" % (rel, LAYERS[lay][0], sym, where,
                                                     LAYERS[layer_of(where)][0]))
                bad += 1
    if bad:
        print("layers: %d use%s of a higher layer" % (bad, "" if bad == 1 else "s"))
        return 1
    print("layers: %d objects, every use points down" % len(objs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

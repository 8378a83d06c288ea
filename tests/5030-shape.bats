#!/usr/bin/env bats
# 5030-shape.bats: --shape NAME=DIMS on every tool that reads a model: a
# batch-1 export run at another batch (ResNet-18, the transformer encoder
# whose Reshape targets spell out the batch, a ViT whose class token is
# expanded to it), a symbolic batch run at two sizes, mltrain re-batching
# a fixed-batch PyTorch export, and bad input. The reference of a batch
# run is each sample's batch-1 run and, where PyTorch can rebuild the
# model, PyTorch's own run of the batch.
bats_require_minimum_version 1.5.0
load helpers

ML_MODELS=${ML_MODELS:-$(dirname "$ML_BIN")/models}

# The two real models are exported here (cached in build/models, as for
# 9100-models.bats), so the batch tests run on a clean clone too.
setup_file() {
	local rc=0 log=$BATS_FILE_TMPDIR/export.log
	"$PY" "$ML_ROOT/tests/models/export.py" -o "$ML_MODELS" resnet18 transformer >"$log" 2>&1 || rc=$?
	sed 's/^/# /' "$log" >&3
	return "$rc"
}

# need_model NAME: the export of setup_file is there.
need_model() {
	[ -f "$ML_MODELS/$1/model.onnx" ] || {
		echo "$1 was not exported (tests/models/export.py)" >&2
		return 1
	}
}

# stack IN.npy K OUT: IN (batch 1) and K-1 perturbed copies as OUT.npy, each
# sample also as OUT.I.npy.
stack() {
	"$PY" - "$@" <<'PYEOF'
import sys
import numpy as np
x, k, out = np.load(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
r = np.random.RandomState(5)
xs = np.concatenate([x] + [x + 0.1 * r.standard_normal(x.shape).astype(x.dtype)
                           for _ in range(k - 1)])
np.save(out + ".npy", xs)
for i in range(k):
    np.save("%s.%d.npy" % (out, i), xs[i:i + 1])
PYEOF
}

# per_sample BATCH.npy K PREFIX: sample I of BATCH equals PREFIX.I.npy.
per_sample() {
	"$PY" - "$@" <<'PYEOF'
import sys
import numpy as np
y, k, p = np.load(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
assert y.shape[0] == k, y.shape
for i in range(k):
    r = np.load("%s.%d.npy" % (p, i))
    np.testing.assert_allclose(y[i:i + 1], r, rtol=1e-4, atol=1e-5)
PYEOF
}

# torch_ref NAME IN.npy OUT.npy: PyTorch's output on IN for the model that
# tests/models/export.py exported as NAME (rebuilt from its seed; it must
# give the export's own output.npy on the export's input.npy first).
torch_ref() {
	"$PY" - "$ML_ROOT/tests/models" "$ML_MODELS" "$@" <<'PYEOF'
import os, sys
import numpy as np
import torch
sys.path.insert(0, sys.argv[1])
import export
name, x, out = sys.argv[3], np.load(sys.argv[4]), sys.argv[5]
ctor, _ = export.MODELS[name]
torch.manual_seed(export.SEED)
model, shape = ctor()
export.calibrate(model, shape)
model.eval()
d = os.path.join(sys.argv[2], name)
with torch.no_grad():
    y0 = model(torch.from_numpy(np.load(os.path.join(d, "input.npy")))).numpy()
    np.testing.assert_allclose(y0, np.load(os.path.join(d, "output.npy")), rtol=1e-5, atol=1e-6)
    np.save(out, model(torch.from_numpy(x)).numpy())
PYEOF
}

# mkre: re.onnx, x f32[1,4] -> MatMul -> Reshape to a constant [1,2,3] -> Relu.
mkre() {
	"$PY" - <<'PYEOF'
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 6) / 10 - 1, "w")
s = numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "s")
sq = numpy_helper.from_array(np.array([0], dtype=np.int64), "ax")
nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Reshape", ["m", "s"], ["r"], name="re"),
         helper.make_node("Relu", ["r"], ["y"], name="relu")]
g = helper.make_graph(nodes, "re", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])], [w, s])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), "re.onnx")
nodes = [helper.make_node("Squeeze", ["x", "ax"], ["s"], name="sq"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")]
g = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [sq])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), "sq.onnx")
PYEOF
}

@test "ResNet-18 exported at batch 1 runs at batch 4 with --shape, as at batch 1 and in PyTorch" {
	need_model resnet18
	local d=$ML_MODELS/resnet18
	stack "$d/input.npy" 4 x
	run -0 --separate-stderr mlrun "$d/model.onnx" --shape input=4x3x224x224 -i input=x.npy \
		-o out -v --threads 2
	[[ $stderr == *"input 'input' is now f32[4,3,224,224]"* ]]
	for smp in 0 1 2 3; do
		run -0 mlrun "$d/model.onnx" -i input=x.$smp.npy -o ref.$smp -q --threads 2
		cp ref.$smp/output.npy y.$smp.npy
	done
	per_sample out/output.npy 4 y
	npcmp y.0.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
	# and the batch of 4 as PyTorch computes it, sample by sample
	torch_ref resnet18 x.npy pt.npy
	"$PY" -c 'import numpy as np; assert np.load("pt.npy").shape == (4, 1000)'
	npcmp out/output.npy pt.npy --rtol 1e-3 --atol 1e-4
	# without --shape, the batch-1 model refuses the batch
	run -3 --separate-stderr mlrun "$d/model.onnx" -i input=x.npy -q --threads 2
	[ "${#stderr_lines[@]}" -eq 1 ]
	local hint="(--shape input=4x3x224x224 runs the model at this shape)"
	[[ $stderr == *"expected f32[1,3,224,224], got f32[4,3,224,224] $hint" ]]
}

@test "the transformer encoder at batch 3: 10 Reshape targets rewritten, samples as at batch 1" {
	need_model transformer
	local d=$ML_MODELS/transformer
	stack "$d/input.npy" 3 x
	run -0 --separate-stderr mlrun "$d/model.onnx" --shape input=3x12x64 -i input=x.npy -o out -v
	[[ $stderr == *"--shape rewrote 10 Reshape targets"* ]]
	for smp in 0 1 2; do
		run -0 mlrun "$d/model.onnx" -i input=x.$smp.npy -o ref.$smp -q
		cp ref.$smp/output.npy y.$smp.npy
	done
	per_sample out/output.npy 3 y
	npcmp y.0.npy "$d/output.npy" --rtol 1e-3 --atol 1e-4
}

@test "a symbolic batch N: the converted transformer says N and runs at batch 3 and batch 1" {
	need_model transformer
	local d=$ML_MODELS/transformer
	stack "$d/input.npy" 3 x
	run -0 mlconvert "$d/model.onnx" --shape input=Nx12x64 -o t.mlg
	run -0 mlconvert --info t.mlg
	[[ $output == *"input "*"f32[N,12,64]"* ]]
	[[ $output == *"output "*"f32[N,12,10]"* ]]
	run -0 mlrun t.mlg -i input=x.npy -o out3 -q
	run -0 mlrun t.mlg -i input=x.1.npy -o out1 -q
	run -0 mlrun "$d/model.onnx" -i input=x.1.npy -o ref -q
	npcmp out1/output.npy ref/output.npy --rtol 1e-5 --atol 1e-6
	for smp in 0 1 2; do
		run -0 mlrun "$d/model.onnx" -i input=x.$smp.npy -o ref.$smp -q
		cp ref.$smp/output.npy y.$smp.npy
	done
	per_sample out3/output.npy 3 y
	# a new sequence length too, given as sizes
	run -0 mlrun "$d/model.onnx" --shape input=2x20x64 --random -q
}

@test "a torchvision ViT exported at batch 1 runs at batch 3: its class token and attention" {
	"$PY" - <<'PYEOF'
import inspect, warnings
import numpy as np
import torch
import torchvision
torch.manual_seed(0)
m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                         hidden_dim=16, mlp_dim=32, num_classes=10).eval()
torch.nn.init.normal_(m.heads.head.weight)	# torchvision starts it at zeros
kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(m, torch.zeros(1, 3, 32, 32), "vit1.onnx", input_names=["x"],
                      output_names=["y"], opset_version=14, do_constant_folding=True, **kw)
x = np.random.RandomState(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
np.save("x.npy", x)
with torch.no_grad():
    y = m(torch.from_numpy(x)).numpy()
assert np.abs(y).max() > 1, "a trivial output"
np.save("pt.npy", y)
PYEOF
	run -0 --separate-stderr mlrun vit1.onnx --shape x=3x3x32x32 -i x=x.npy -o out -v
	[[ $stderr == *"--shape rewrote 11 Reshape targets"* ]]
	npcmp out/y.npy pt.npy --rtol 1e-4 --atol 1e-4
	# without --shape the batch-1 model refuses a batch of 3
	run -3 mlrun vit1.onnx -i x=x.npy -q
}

@test "every tool that reads a model takes --shape" {
	mkre
	run -0 mlconvert re.onnx --shape x=3x4 --info
	[[ $output == *"x"*"f32[3,4]"* ]]
	[[ $output == *"y"*"f32[3,2,3]"* ]]
	run -0 mlopt re.onnx --shape x=Bx4 -o o.mlg
	run -0 mlrun o.mlg --random --dim B=5
	[ "${lines[0]}" = "y f32[5,2,3]" ]
	run -0 mlquant re.onnx --shape x=2x4 --dynamic -o q.mlg
	run -0 mlrun q.mlg --random
	[ "${lines[0]}" = "y f32[2,2,3]" ]
	run -0 mlprof re.onnx --shape x=6x4 --random --repeat 1 --json -o p.json
	run -0 mlrun re.onnx --shape x=B,4 --random --dim B=2
	[ "${lines[0]}" = "y f32[2,2,3]" ]
}

@test "mltrain re-batches a model exported with a fixed batch of 4, saying so under -v" {
	"$PY" - <<'PYEOF'
import torch
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.l = torch.nn.Linear(4 * 8 * 8, 4)
    def forward(self, x):
        y = torch.relu(self.c(x))
        return self.l(y.view(y.size(0), -1))
torch.onnx.export(M(), torch.zeros(4, 1, 8, 8), "fixed4.onnx", input_names=["x"],
                  output_names=["y"], opset_version=14)
import gzip, os, struct
import numpy as np
os.makedirs("d")
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
y = r.randint(0, 4, 200)
x = (r.rand(200, 8, 8) * 200).astype(np.uint8)
open("d/train-images-idx3-ubyte", "wb").write(idx(x))
open("d/train-labels-idx1-ubyte", "wb").write(idx(y))
PYEOF
	run -0 --separate-stderr mltrain fixed4.onnx --data d --batch 16 --threads 1 -o o.mlg -v
	local said="input 'x' had a fixed batch of 4; re-batched to N (--batch 16)"
	[[ $stderr == *"mltrain: fixed4.onnx: $said, 1 Reshape target rewritten"* ]]
	run -0 mlrun o.mlg --random --dim N=3
	[ "${lines[0]}" = "y f32[3,4]" ]
	# --shape with a fixed batch other than --batch is the user's word: refused as before
	run -3 --separate-stderr mltrain fixed4.onnx --shape x=8x1x8x8 --data d --batch 16 -o o2.mlg
	[[ $stderr == *"has a fixed batch of 8, not 16"* ]]
}

# mkidx DIR N H W CLASSES: N random grey HxW images and labels, MNIST's idx files in DIR.
mkidx() {
	"$PY" - "$@" <<'PYEOF'
import os, struct, sys
import numpy as np
d, n, h, w, k = sys.argv[1], *map(int, sys.argv[2:])
os.makedirs(d)
r = np.random.RandomState(1)
def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", x) for x in a.shape) + a.tobytes()
open(d + "/train-images-idx3-ubyte", "wb").write(idx((r.rand(n, h, w) * 200).astype(np.uint8)))
open(d + "/train-labels-idx1-ubyte", "wb").write(idx(r.randint(0, k, n)))
PYEOF
}

@test "mltrain trains the test suite's LeNet exported at batch 4 with --batch 64" {
	"$PY" - "$ML_ROOT/tests/models" <<'PYEOF'
import inspect, sys, warnings
import torch
sys.path.insert(0, sys.argv[1])
import export
torch.manual_seed(0)
kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(export.LeNet(), torch.zeros(4, 1, 28, 28), "lenet4.onnx",
                      input_names=["input"], output_names=["output"], opset_version=14, **kw)
PYEOF
	mkidx d 256 28 28 10
	run -0 --separate-stderr mlconvert lenet4.onnx --info
	[[ $output == *"input "*"f32[4,1,28,28]"* ]]
	run -0 --separate-stderr mltrain lenet4.onnx --data d --batch 64 --epochs 1 --threads 2 \
		-o o.mlg -v
	[[ $stderr == *"input 'input' had a fixed batch of 4; re-batched to N (--batch 64)"* ]]
	run -0 mlrun o.mlg --random --dim N=64
	[ "${lines[0]}" = "output f32[64,10]" ]
}

@test "mltrain names --shape where a fixed batch cannot change, trains at that batch as it is" {
	"$PY" - <<'PYEOF'
import inspect, warnings
import torch
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8 * 8, 4)
    def forward(self, x):
        # the zeros are folded into a [4, 1, 8, 8] constant by the export
        x = torch.cat([x, torch.zeros(x.size(0), 1, 8, 8)], 1)[:, :1]
        return self.l(x.reshape(x.size(0), -1))
kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(M(), torch.zeros(4, 1, 8, 8), "zeros4.onnx", input_names=["x"],
                      output_names=["y"], opset_version=14, do_constant_folding=True, **kw)
PYEOF
	mkidx d 64 8 8 4
	run -4 --separate-stderr mltrain zeros4.onnx --data d --batch 16 -o o.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mltrain: zeros4.onnx: the model's input 'x' has a fixed batch of 4 that"* ]]
	local why="node '/Concat' (Concat) does not fit the new sizes: its input '/Constant_output_0'"
	why+=" (a constant) keeps [4,1,8,8]: dim 0 holds the export's size 4"
	[[ $stderr == *"$why (export with dynamic_axes, or keep that size)); give --shape" ]]
	[ ! -e o.mlg ]
	# at its own batch it trains as it is, saying so under -v
	run -0 --separate-stderr mltrain zeros4.onnx --data d --batch 4 --epochs 1 -o o.mlg -v
	[[ $stderr == *"mltrain: zeros4.onnx: input 'x' keeps its fixed batch of 4 (a symbolic"* ]]
	run -0 mlrun o.mlg --random
	[ "${lines[0]}" = "y f32[4,4]" ]
}

@test "mltrain re-batches a class token's Expand to --batch itself, N being refused there" {
	"$PY" - <<'PYEOF'
import inspect, warnings
import torch
torch.manual_seed(0)
class M(torch.nn.Module):
    """Patches and a class token, as a ViT has them, on 8x8 grey images."""
    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(1, 8, 4, stride=4)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
        self.head = torch.nn.Linear(8, 4)
    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), p], 1)
        return self.head(torch.relu(h).mean(1))
kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(M(), torch.zeros(4, 1, 8, 8), "cls4.onnx", input_names=["x"],
                      output_names=["y"], opset_version=14, do_constant_folding=True, **kw)
PYEOF
	mkidx d 64 8 8 4
	run -0 --separate-stderr mltrain cls4.onnx --data d --batch 16 --epochs 1 --val-split 0.3 \
		-o o.mlg -v
	[[ $stderr == *"input 'x' had a fixed batch of 4; re-batched to 16 (--batch 16)"* ]]
	[[ $stderr == *"val loss"* ]]
	run -0 mlrun o.mlg --random
	[ "${lines[0]}" = "y f32[16,4]" ]
}

@test "--shape refuses an unknown input (listing them), a wrong rank and two shapes with status 3" {
	mkre
	run -3 --separate-stderr mlrun re.onnx --shape nope=2x4 --random
	[ "$stderr" = "mlrun: re.onnx: --shape: the model has no input 'nope' (its inputs: x)" ]
	run -3 --separate-stderr mlconvert re.onnx --shape x=2x4x1 --info
	[ "$stderr" = "mlconvert: re.onnx: --shape: input 'x' has rank 2, not 3" ]
	run -3 --separate-stderr mlopt re.onnx --shape x=2x4 --shape x=3x4 -o o.mlg
	[ "$stderr" = "mlopt: re.onnx: --shape: input 'x' is given two shapes" ]
	[ ! -e o.mlg ]
}

@test "--shape refuses malformed, zero and negative dims with status 2" {
	local s
	for s in x=0x4 x=-1x4 x=2xx4 x=2x4x x= x 'x=2.5x4' 'x=2x$' x=1x1x1x1x1x1x1x1x1; do
		run -2 --separate-stderr mlrun --shape "$s" --random re.onnx
		[[ ${stderr_lines[0]} == "mlrun: --shape: "* ]]
		[[ ${stderr_lines[1]} == "usage: mlrun "* ]]
	done
	run -2 --separate-stderr mltrain --shape x=0x4 --data d -o o.mlg m.mlt
	[[ ${stderr_lines[0]} == "mltrain: --shape: dim 0 of 'x=0x4' is '0': a dim is a size"* ]]
}

@test "--shape names the node it cannot rewrite, with status 4" {
	mkre
	run -4 --separate-stderr mlrun sq.onnx --shape x=2x4 --random
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: sq.onnx: --shape: node 'sq' (Squeeze) does not fit the new sizes"* ]]
	need_model transformer
	run -4 --separate-stderr mlrun "$ML_MODELS/transformer/model.onnx" --shape input=NxLx64 --random
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == *"node '/enc/layers.0/self_attn/Reshape_4' (Reshape): its shape [12,1,64]"* ]]
	[[ $stderr == *"would need two symbolic dims; give sizes instead of names" ]]
}

@test "--shape gives the Expand of a class token the new batch, or names it for a symbolic one" {
	"$PY" - <<'PYEOF'
import inspect, warnings
import numpy as np
import torch
torch.manual_seed(0)
class M(torch.nn.Module):
    """A class token expanded to the batch, as a ViT does."""
    def __init__(self):
        super().__init__()
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
        self.lin = torch.nn.Linear(8, 8)
    def forward(self, x):
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), self.lin(x)], 1)
m = M().eval()
kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(m, torch.zeros(2, 5, 8), "cls2.onnx", input_names=["x"],
                      output_names=["y"], opset_version=14, do_constant_folding=True, **kw)
x = np.random.RandomState(3).standard_normal((4, 5, 8)).astype(np.float32)
np.save("x.npy", x)
with torch.no_grad():
    np.save("pt.npy", m(torch.from_numpy(x)).numpy())
PYEOF
	run -0 mlrun cls2.onnx --random
	[ "${lines[0]}" = "y f32[2,6,8]" ]
	# the batch went into the Expand's shape, made of constants: it takes the new one
	run -0 --separate-stderr mlrun cls2.onnx --shape x=4x5x8 -i x=x.npy -o out -v
	[[ $stderr == *"--shape rewrote 0 Reshape targets"* ]]
	npcmp out/y.npy pt.npy --rtol 1e-5 --atol 1e-6
	run -0 mlconvert cls2.onnx --shape x=4x9x8 --info
	[[ $output == *"y "*"f32[4,10,8]"* ]]
	# a symbolic batch cannot be an Expand's target: named, status 4
	run -4 --separate-stderr mlrun cls2.onnx --shape x=Nx5x8 --random
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "mlrun: cls2.onnx: --shape: node '/Concat' (Concat) does not fit"* ]]
	[[ $stderr == *"its input '/Expand_output_0' (from node '/Expand' (Expand)) keeps"* ]]
	[[ $stderr == *"[2,1,8]: dim 0 holds the export's size 2 (an Expand takes a size there"* ]]
}

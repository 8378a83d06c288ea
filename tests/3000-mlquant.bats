#!/usr/bin/env bats
# 3000-mlquant.bats: mlquant's forms (int8 ops, QDQ, dynamic, fp16/bf16),
# options, pipes, and refusals: bad calibration data (3), usage errors (2),
# unwritable output (1).
bats_require_minimum_version 1.5.0
load helpers

# mkcnn: cnn.onnx (conv, depthwise, residual Add, pools, Gemm) and mlp.onnx,
# calibration data cal.npy and cal.npz, one sample x1.npy, from a seeded PyTorch model.
# STATIC=1 fixes the batch size at 1 (no dynamic axes).
mkcnn() {
	"$PY" - <<'PYEOF'
import os, numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(1, 8, 3, padding=1); s.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        s.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16); s.c3 = nn.Conv2d(16, 16, 1)
        s.fc = nn.Linear(16, 10)
    def forward(s, x):
        x = torch.relu(s.c1(x)); x = nn.functional.max_pool2d(x, 2)
        y = torch.relu(s.c2(x)); z = s.c3(torch.clamp(s.dw(y), 0, 6))
        x = torch.relu(y + z); x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return s.fc(x)
x = torch.rand(32, 1, 28, 28)
dyn = None if os.environ.get('STATIC') else {'x': {0: 'n'}, 'y': {0: 'n'}}
torch.onnx.export(CNN().eval(), x[:1], 'cnn.onnx', input_names=['x'], output_names=['y'],
                  opset_version=13, dynamic_axes=dyn)
mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
torch.onnx.export(mlp, x[:1], 'mlp.onnx', input_names=['x'], output_names=['y'],
                  opset_version=13, dynamic_axes=dyn)
np.save('cal.npy', x.numpy()); np.savez('cal.npz', x=x.numpy()); np.save('x1.npy', x[:1].numpy())
np.save('bad.npy', np.zeros((4, 3, 5), np.float32))
PYEOF
}

# sqnr A B: the SQNR in dB of array B against A, as an integer.
sqnr() {
	"$PY" -c "import numpy as np,sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); \
print(int(10*np.log10((a**2).sum()/max(((a-b)**2).sum(),1e-30))))" "$1" "$2"
}

@test "mlquant writes an int8 model of Q8 ops that runs close to the float one" {
	mkcnn
	run -0 mlquant -c cal.npy cnn.onnx -o cnn8.mlg
	run -0 mlconvert cnn8.mlg -o cnn8.mlt
	grep -q 'ml.Q8Conv' cnn8.mlt
	grep -q 'ml.Q8Add' cnn8.mlt
	grep -q 'ml.Q8MaxPool' cnn8.mlt
	mlrun cnn.onnx -i x=x1.npy -o f
	mlrun cnn8.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 25 ]
}

@test "mlquant keeps int8 files under a third of the float size" {
	mkcnn
	mlquant -c cal.npy mlp.onnx -o mlp8.mlg
	mlconvert mlp.onnx -o mlp.mlg
	a=$(stat -c %s mlp.mlg); b=$(stat -c %s mlp8.mlg)
	[ $((b * 10)) -le $((a * 3)) ]
}

@test "mlquant gives the same int8 results on the C and AVX2 paths" {
	mkcnn
	mlquant -c cal.npy cnn.onnx -o cnn8.mlg
	ML_Q8_PATH=c mlrun cnn8.mlg -i x=x1.npy -o c
	mlrun cnn8.mlg -i x=x1.npy -o v
	cmp c/y.npy v/y.npy
	# the depthwise layer's AVX2 kernel included (the path is ignored without AVX2)
	ML_Q8_PATH=avx2 mlrun cnn8.mlg -i x=cal.npy -o a
	ML_Q8_PATH=c mlrun cnn8.mlg -i x=cal.npy -o c2
	cmp a/y.npy c2/y.npy
}

@test "mlquant --reduce-range: 7-bit weights, the same bytes on every path, and checked" {
	mkcnn
	mlquant -c cal.npy cnn.onnx -o full.mlt
	mlquant -c cal.npy --reduce-range cnn.onnx -o r7.mlt
	run -1 grep -q 'weight_bits' full.mlt
	[ "$(grep -c 'weight_bits = 7' r7.mlt)" -ge 3 ]
	# full 8-bit weights: more accurate against the float model
	mlrun cnn.onnx -i x=cal.npy -o f
	mlrun full.mlt -i x=cal.npy -o q8
	mlrun r7.mlt -i x=cal.npy -o q7
	[ "$(sqnr f/y.npy q8/y.npy)" -gt "$(sqnr f/y.npy q7/y.npy)" ]
	for p in c avx2 vnni avxvnni amx; do
		ML_Q8_PATH=$p mlrun r7.mlt -i x=cal.npy -o "r7$p"
		cmp q7/y.npy "r7$p/y.npy"
		ML_Q8_PATH=$p mlrun full.mlt -i x=cal.npy -o "r8$p"
		cmp q8/y.npy "r8$p/y.npy"
	done
	# weight_bits 7 over 8-bit weights: refused where the AVX2 kernel relies on it
	sed 's/x_zero_point = /weight_bits = 7, x_zero_point = /' full.mlt >lie.mlt
	grep -q 'weight_bits = 7' lie.mlt
	if grep -q avx2 /proc/cpuinfo; then
		ML_Q8_PATH=avx2 run -3 --separate-stderr mlrun lie.mlt -i x=x1.npy
		[[ $stderr == *"weight_bits is 7 but a weight is outside [-64, 63]"* ]]
	fi
	sed 's/x_zero_point = /weight_bits = 6, x_zero_point = /' full.mlt >bad.mlt
	run -3 --separate-stderr mlrun bad.mlt -i x=x1.npy
	[[ $stderr == *"weight_bits must be 7 or 8"* ]]
	run -2 --separate-stderr mlquant -c cal.npy --qdq --reduce-range cnn.onnx -o x.mlg
	[[ $stderr == *"--reduce-range is for the int8 ops"* ]]
}

@test "an int8 model runs on --device cl with the CPU's results, bit for bit" {
	mlrun --devices --json >devs.json 2>/dev/null || skip "mlrun --devices failed"
	grep -q '"cl:0"' devs.json || skip "no OpenCL device"
	STATIC=1 mkcnn
	mlquant -c cal.npy cnn.onnx -o cnn8.mlg
	run -0 mlrun cnn8.mlg --device cl --plan
	# every Q8 node (and the Flatten between them) is placed on the device
	[ "$(grep -c ' Q8' <<<"$output")" -eq 9 ]
	[ "$(grep ' Q8' <<<"$output" | grep -vc ' cl:0 ')" -eq 0 ]
	mlrun cnn8.mlg -i x=x1.npy -o c
	mlrun cnn8.mlg --device cl -i x=x1.npy -o g
	cmp c/y.npy g/y.npy
	mlquant -c cal.npy mlp.onnx -o mlp8.mlg
	mlrun mlp8.mlg -i x=x1.npy -o mc
	mlrun mlp8.mlg --device cl -i x=x1.npy -o mg
	cmp mc/y.npy mg/y.npy
}

@test "mlquant drops a checkpoint's training state from the int8 model" {
	"$PY" -c "
import numpy as np
r = np.random.default_rng(0)
x = r.random((64, 1, 28, 28), dtype=np.float32); y = (x.mean((1, 2, 3)) > 0.5).astype(np.int64)
np.savez('d.npz', x=x, y=y); np.save('cal.npy', x[:16]); np.save('x1.npy', x[:1])"
	mltrain "$ML_ROOT/examples/fashion-mlp.mlt" --data d.npz --optimizer adam --epochs 1 -q -o m.mlg
	# the checkpoint (m.ckpt.mlg) has the optimizer's state; -o's model has none
	mv m.ckpt.mlg t.mlg
	mlconvert t.mlg -o t.mlt
	grep -q 'weight.m = ' t.mlt
	mlquant -c cal.npy t.mlg -o t8.mlg
	mlconvert t8.mlg -o t8.mlt
	run -1 grep -q 'train.step' t8.mlt
	run -1 grep -q 'weight.m = ' t8.mlt
	a=$(stat -c %s t.mlg); b=$(stat -c %s t8.mlg)
	[ $((b * 10)) -le $((a * 3)) ]
	mlrun t8.mlg -i x=x1.npy -o o
}

@test "mlquant quantises the fused ops of a graph mlopt optimised, and names those it cannot" {
	mkcnn
	mlopt -O2 cnn.onnx -o o.mlg
	mlconvert o.mlg -o o.mlt
	grep -q 'ml.FusedConv' o.mlt
	run -0 --separate-stderr mlquant -c cal.npy --report o.mlg -o o8.mlg
	[[ $output == *"/c1/Conv"*"int8"* ]]
	[[ $output == *"/dw/Conv"*"ConvDepthwise+Clip"*"int8"* ]]
	[[ $stderr != *"stay"*"float"* ]]
	mlconvert o8.mlg -o o8.mlt
	run -1 grep -q 'ml.Fused' o8.mlt
	# the same int8 model as from the unoptimised graph
	mlquant -c cal.npy cnn.onnx -o c8.mlg
	mlrun o8.mlg -i x=cal.npy -o a
	mlrun c8.mlg -i x=cal.npy -o b
	cmp a/y.npy b/y.npy
	# a fused activation the int8 ops lack stays float, and mlquant says which
	"$PY" - <<'PYEOF'
import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.Sigmoid(), nn.Flatten(), nn.Linear(8 * 26 * 26, 4)).eval()
torch.onnx.export(m, torch.rand(1, 1, 28, 28), 'sig.onnx', input_names=['x'], output_names=['y'],
                  opset_version=13)
PYEOF
	mlopt -O2 sig.onnx -o sig.mlg
	mlconvert sig.mlg -o sig.mlt
	grep -q 'activation = "Sigmoid"' sig.mlt || skip "mlopt does not fuse Conv+Sigmoid"
	run -0 --separate-stderr mlquant -c cal.npy sig.mlg -o sig8.mlg
	[[ $stderr == *"1 fused node ("*") stays float"* ]]
	mlrun sig8.mlg -i x=x1.npy -o s
}

@test "mlquant quantises an -O2 MobileNet-V2 block's channels-last ConvNHWC nodes" {
	"$PY" - <<'PYEOF'
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        s.e = nn.Conv2d(32, 96, 1); s.d = nn.Conv2d(96, 96, 3, padding=1, groups=96)
        s.p = nn.Conv2d(96, 32, 1)
    def forward(s, x):
        x = nn.functional.relu6(s.stem(x))
        y = s.p(nn.functional.relu6(s.d(nn.functional.relu6(s.e(x)))))
        return torch.flatten(nn.functional.adaptive_avg_pool2d(x + y, 1), 1)
x = torch.rand(8, 3, 40, 40)
torch.onnx.export(Block().eval(), x[:1], 'mb.onnx', input_names=['x'], output_names=['y'],
                  opset_version=13)
np.save('cal.npy', x.numpy()); np.save('x1.npy', x[:1].numpy())
PYEOF
	mlopt -O2 mb.onnx -o o.mlg
	mlconvert o.mlg -o o.mlt
	[ "$(grep -c 'ml.ConvNHWC' o.mlt)" -ge 3 ]
	run -0 --separate-stderr mlquant -c cal.npy --report -v o.mlg -o o8.mlg
	[[ $output == *"/stem/Conv "*"int8"* ]]
	[[ $output == *"/d/Conv "*"ConvDepthwise+Relu"*"int8"* ]]
	[[ $output == *"/p/Conv.add "*"Add"*"int8"* ]]
	mlconvert o8.mlg -o o8.mlt
	run -1 grep -q 'ConvNHWC' o8.mlt
	[ "$(grep -c 'ml.Q8Conv' o8.mlt)" -eq 4 ]
	# back in NCHW: no Transpose left (the Clips between the convolutions and the pooling
	# moved past theirs), the pooling an int8 GlobalAveragePool again
	[ "$(grep -c ' = Transpose' o8.mlt)" -eq 0 ]
	grep -q 'ml.Q8GlobalAveragePool' o8.mlt
	mlrun mb.onnx -i x=x1.npy -o f
	mlrun o8.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 25 ]
	# fp16: ConvNHWC keeps its fp16 weights (the CPU widens them into its panels once)
	run -0 mlquant --dtype fp16 o.mlg -o h.mlg
	mlconvert h.mlg -o h.mlt
	grep -q 'float16\[1,1,32,96\]' h.mlt
	[ "$(grep -c 'ml.ConvNHWC' h.mlt)" -ge 3 ]
	mlrun h.mlg -i x=x1.npy -o h
	[ "$(sqnr f/y.npy h/y.npy)" -ge 50 ]
	# bf16: the pointwise ConvNHWC nodes (one GEMM each) get bf16 weights, multiplied as
	# they are (AMX, or vdpbf16ps with ML_BF16=dp) or widened once (ML_BF16=f32); the
	# stem (3x3) and the depthwise weights stay f32
	run -0 --separate-stderr mlquant --dtype bf16 o.mlg -o b.mlg
	mlconvert b.mlg -o b.mlt
	grep -q '^bfloat16\[1,1,32,96\]' b.mlt
	grep -q '^bfloat16\[1,1,96,32\]' b.mlt
	grep -q '^float\[3,3,3,32\]' b.mlt
	grep -q '^float\[3,3,1,96\]' b.mlt
	mlrun b.mlg -i x=x1.npy -o b
	ML_BF16=f32 mlrun b.mlg -i x=x1.npy -o bw
	ML_BF16=dp mlrun b.mlg -i x=x1.npy -o bd
	# without AMX: vdpbf16ps where it issues at the FMA's rate (mlrun -v says so), as
	# with ML_BF16=dp here (the block's bf16 products are pointwise, of 96 and 32
	# columns), else the weights widened into the panels once, as with ML_BF16=f32
	ML_AMX=0 run -0 --separate-stderr mlrun b.mlg -i x=x1.npy -o bn -v
	mlrun mb.onnx -i x=x1.npy -o f8
	[ "$(sqnr f8/y.npy b/y.npy)" -ge 30 ]
	[ "$(sqnr f8/y.npy bw/y.npy)" -ge 30 ]
	[ "$(sqnr f8/y.npy bn/y.npy)" -ge 30 ]
	if [[ "$stderr" == *"mlrun: bf16 products on vdpbf16ps (AVX512_BF16), but for"* ]]; then
		cmp bd/y.npy bn/y.npy
	else
		[[ "$stderr" == *"mlrun: bf16 weights widened to f32 once: this CPU"* ]]
		cmp bw/y.npy bn/y.npy
	fi
	[ "$(sqnr b/y.npy bd/y.npy)" -ge 60 ]
	run -0 mlconvert b.mlg -o b.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check b.onnx
	# a file of an older mlopt, its one-group ConvNHWC weights packed in panels (packed_n):
	# it runs, and quantises to the same int8 model
	"$PY" - <<'PYEOF'
import re, base64, numpy as np
s = open('o.mlt').read()
for name, cout in (('stem.weight_nhwc', 32), ('e.weight_nhwc', 96)):
    m = re.search(r'float\[([0-9,]+)\] %s = base64"([^"]*)"' % re.escape(name), s)
    w = np.frombuffer(base64.b64decode(m.group(2)), np.float32).reshape(-1, cout)
    p = np.zeros(((cout + 31) // 32, w.shape[0], 32), np.float32)
    for j in range(cout):
        p[j // 32, :, j % 32] = w[:, j]
    s = s[:m.start()] + 'float[%d,%d,32] %s = base64"%s"' % (
        p.shape[0], p.shape[1], name, base64.b64encode(p.tobytes()).decode()) + s[m.end():]
    s = re.sub(r'(= ml\.ConvNHWC <)([^>]*> \([^,]*, %s\b)' % re.escape(name),
               r'\1packed_n = %d, \2' % cout, s)
open('old.mlt', 'w').write(s)
PYEOF
	[ "$(grep -c 'packed_n' old.mlt)" -eq 2 ]
	mlrun old.mlt -i x=x1.npy -o po
	mlrun o.mlg -i x=x1.npy -o pn
	npcmp po/y.npy pn/y.npy --rtol 1e-5 --atol 1e-6
	run -0 mlquant -c cal.npy old.mlt -o old8.mlg
	mlrun old8.mlg -i x=x1.npy -o q2
	cmp q/y.npy q2/y.npy
}

@test "mlquant quantises an -O2 encoder's FusedMatMuls (rank-3 inputs, bias, Relu)" {
	"$PY" - <<'PYEOF'
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class Enc(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        s.head = nn.Linear(32, 5)
    def forward(s, x):
        return s.head(s.l(x))
x = torch.randn(16, 8, 32)
torch.onnx.export(Enc().eval(), x[:1], 'enc.onnx', input_names=['x'], output_names=['y'],
                  opset_version=14)
np.save('cal.npy', x.numpy()); np.save('x1.npy', x[:1].numpy())
PYEOF
	mlopt -O2 enc.onnx -o o.mlg
	mlconvert o.mlg -o o.mlt
	[ "$(grep -c 'ml.FusedMatMul' o.mlt)" -eq 4 ]
	run -0 --separate-stderr mlquant -c cal.npy --report -v o.mlg -o o8.mlg
	# in_proj, out_proj (Gemm), linear1 with its Relu, linear2, head: all five products
	[[ $stderr == *"5 of 5 layers quantised"* ]]
	# the report goes to stdout (the model goes to a file)
	[[ $output == *"/l/linear1/MatMul"*"Gemm+Relu"*"int8"* ]]
	[[ $output != *"stay"*"float"* ]]
	mlconvert o8.mlg -o o8.mlt
	run -1 grep -q 'ml.FusedMatMul' o8.mlt
	[ "$(grep -c 'ml.Q8Conv' o8.mlt)" -eq 5 ]
	# Attention's products (activation by activation) stay float
	grep -q 'ml.Attention' o8.mlt
	mlrun o.mlg -i x=x1.npy -o f
	mlrun o8.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 25 ]
	# the products' kernels (8 rows, and 8 + 4 for 12 tokens) and the
	# quantisation of the rank-3 activations give the same bytes on every path
	"$PY" -c 'import numpy as np; np.save("x12.npy", np.random.RandomState(3).standard_normal((1, 12, 32)).astype(np.float32))'
	mlrun o8.mlg --shape x=1x12x32 -i x=x12.npy -o k
	for p in c avx2; do
		ML_Q8_PATH=$p mlrun o8.mlg -i x=x1.npy -o "q$p"
		cmp q/y.npy "q$p/y.npy"
		ML_Q8_PATH=$p mlrun o8.mlg --shape x=1x12x32 -i x=x12.npy -o "k$p"
		cmp k/y.npy "k$p/y.npy"
	done
}

@test "mlquant reads the model from a pipe and writes to one" {
	mkcnn
	mlconvert cnn.onnx -o - | mlquant -c cal.npy | mlrun - -i x=x1.npy -o p
	[ -f p/y.npy ]
}

@test "mlquant reads calibration data from .npz and honours --samples" {
	mkcnn
	run -0 mlquant -c cal.npz --samples 4 cnn.onnx -o a.mlg
	run -0 mlrun a.mlg -i x=x1.npy
}

@test "mlquant calibrates by minmax, percentile and entropy" {
	mkcnn
	for m in minmax percentile entropy; do
		run -0 mlquant -c cal.npy --method $m cnn.onnx -o $m.mlg
		run -0 mlrun $m.mlg -i x=x1.npy
	done
	run -0 mlquant -c cal.npy --method percentile --percentile 99.9 cnn.onnx -o p.mlg
}

@test "mlquant --dtype int8 uses symmetric activations" {
	mkcnn
	run -0 mlquant -c cal.npy --dtype int8 cnn.onnx -o s.mlg
	mlconvert s.mlg -o s.mlt
	grep -q 'zero_point = 128' s.mlt
	mlrun cnn.onnx -i x=x1.npy -o f
	mlrun s.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 20 ]
}

@test "mlquant --qdq writes QuantizeLinear/DequantizeLinear that exports to ONNX" {
	mkcnn
	run -0 mlquant -c cal.npy --qdq cnn.onnx -o qdq.mlg
	mlconvert qdq.mlg -o qdq.mlt
	grep -q QuantizeLinear qdq.mlt
	run -0 mlconvert qdq.mlg -o qdq.onnx
	"$PY" -c "import onnx; onnx.checker.check_model(onnx.load('qdq.onnx'))"
	mlrun cnn.onnx -i x=x1.npy -o f
	mlrun qdq.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 25 ]
}

@test "mlquant --dynamic quantises weights without calibration" {
	mkcnn
	run -0 mlquant --dynamic mlp.onnx -o d.mlg
	mlrun mlp.onnx -i x=x1.npy -o f
	mlrun d.mlg -i x=x1.npy -o q
	[ "$(sqnr f/y.npy q/y.npy)" -ge 30 ]
}

@test "mlquant --dtype fp16 and bf16 halve the weights" {
	mkcnn
	mlconvert mlp.onnx -o mlp.mlg
	for t in fp16 bf16; do
		run -0 mlquant --dtype $t mlp.onnx -o $t.mlg
		mlrun mlp.onnx -i x=x1.npy -o f
		mlrun $t.mlg -i x=x1.npy -o $t
		[ "$(sqnr f/y.npy $t/y.npy)" -ge 30 ]
		a=$(stat -c %s mlp.mlg); b=$(stat -c %s $t.mlg)
		[ $((b * 10)) -le $((a * 6)) ]
	done
}

@test "mlquant --dtype fp16: the products read their fp16 weights directly, no Cast; biases stay f32" {
	mkcnn
	mlconvert cnn.onnx -o f.mlg
	mlopt -O2 cnn.onnx -o o2.mlg
	run -0 mlquant --dtype fp16 cnn.onnx -o h.mlg
	run -0 --separate-stderr mlquant --dtype fp16 o2.mlg -o h2.mlg
	[ -z "$stderr" ]
	mlrun f.mlg -i x=cal.npy -o f
	for m in h h2; do
		mlconvert $m.mlg -o $m.mlt
		run -1 grep ' = Cast ' $m.mlt
		# the weights of the four convolutions (the depthwise one's too) and the Gemm
		[ "$(grep -c '^float16\[' $m.mlt)" -eq 5 ]
		run -1 grep '^float16\[[0-9]*\] ' $m.mlt
		mlrun $m.mlg -i x=cal.npy -o $m
		npcmp f/y.npy $m/y.npy --rtol 0 --atol 2e-3
	done
	# from an -O2 model the fused nodes stay, with their fp16 weights
	grep -q '= ml.FusedConv <' h2.mlt
	# ONNX has a Cast to float in front of each product, in every opset; reading it back drops them
	run -0 mlconvert h2.mlg -o h2.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check h2.onnx
	mlconvert h2.onnx -o back.mlt
	run -1 grep ' = Cast ' back.mlt
	[ "$(grep -c '^float16\[' back.mlt)" -eq 5 ]
	# OpenCL runs such products too, their weights widened on the device,
	# with the CPU's results
	if mlrun --devices --json 2>/dev/null | grep -q '"cl:0"'; then
		run -0 mlrun h2.mlg -i x=cal.npy --device cl -o hc
		npcmp h2/y.npy hc/y.npy --rtol 1e-5 --atol 1e-5
		# a static batch, which --device cl places whole: every product on the device
		STATIC=1 mkcnn
		mlquant -q --dtype fp16 cnn.onnx -o s16.mlg
		run -0 mlrun s16.mlg --device cl --plan
		[ "$(grep -cE ' (Conv|Gemm) ' <<<"$output")" -eq 5 ]
		[ "$(grep -E ' (Conv|Gemm) ' <<<"$output" | grep -vc ' cl:0 ')" -eq 0 ]
		mlrun s16.mlg -i x=x1.npy -o sc
		mlrun s16.mlg --device cl -i x=x1.npy -o sg
		npcmp sc/y.npy sg/y.npy --rtol 1e-5 --atol 1e-5
	fi
}

@test "mlquant --dtype bf16: the products read their bf16 weights directly, no Cast, and match fp32" {
	mkcnn
	mlconvert cnn.onnx -o f.mlg
	mlopt -O2 cnn.onnx -o o2.mlg
	run -0 mlquant --dtype bf16 cnn.onnx -o b.mlg
	run -0 --separate-stderr mlquant --dtype bf16 o2.mlg -o b2.mlg
	[ -z "$stderr" ]
	mlrun f.mlg -i x=cal.npy -o f
	for m in b b2; do
		mlconvert $m.mlg -o $m.mlt
		run -1 grep ' = Cast ' $m.mlt
		# the weights of the three dense convolutions and the Gemm are bf16; the
		# depthwise one's stays f32 (its kernel is f32), as do the biases
		[ "$(grep -c '^bfloat16\[' $m.mlt)" -eq 4 ]
		grep -q '^float\[16,1,3,3\]' $m.mlt
		mlrun $m.mlg -i x=cal.npy -o $m
		npcmp f/y.npy $m/y.npy --rtol 0 --atol 3e-2
		# the fallback (the weights converted to f32 once) agrees as closely
		ML_BF16=f32 mlrun $m.mlg -i x=cal.npy -o $m-f32
		npcmp f/y.npy $m-f32/y.npy --rtol 0 --atol 3e-2
	done
	# from an -O2 model the fused nodes stay, with their bf16 weights
	grep -q '= ml.FusedConv <' b2.mlt
	# top-1 of the 32 samples agrees with fp32
	"$PY" -c "import numpy as np; a=np.load('f/y.npy'); b=np.load('b2/y.npy'); \
assert (a.argmax(1) == b.argmax(1)).all()"
	# ONNX has a Cast to float in front of each product; reading it back drops them
	run -0 mlconvert b2.mlg -o b2.onnx
	run -0 "$PY" "$TOOLS_DIR/onnxrt.py" check b2.onnx
	[ "$("$PY" -c "import onnx; m=onnx.load('b2.onnx'); \
print(sum(n.op_type == 'Cast' for n in m.graph.node))")" -eq 4 ]
	mlconvert b2.onnx -o back.mlt
	run -1 grep ' = Cast ' back.mlt
	[ "$(grep -c '^bfloat16\[' back.mlt)" -eq 4 ]
}

@test "a bf16 model of opset 11 does not export to ONNX (Cast takes bf16 from 13): status 4" {
	"$PY" - <<'PYEOF'
import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
torch.onnx.export(m, torch.rand(1, 3, 8, 8), 'c11.onnx', input_names=['x'],
                  output_names=['y'], opset_version=11)
PYEOF
	run -0 mlquant --dtype bf16 c11.onnx -o b.mlg
	run -4 --separate-stderr mlconvert b.mlg -o b.onnx
	[[ $stderr == *"bf16 weights need opset 13 or later, not 11"* ]]
	[ ! -e b.onnx ]
}

@test "mlquant --pow2 runs with power-of-two weights" {
	mkcnn
	run -0 mlquant -c cal.npy --pow2 mlp.onnx -o p.mlg
	run -0 mlrun p.mlg -i x=x1.npy
}

@test "mlquant --exclude keeps named layers float" {
	mkcnn
	run -0 --separate-stderr mlquant -c cal.npy --exclude /c1/Conv,/fc/Gemm --report cnn.onnx -o e.mlg
	[[ $output == *"/c1/Conv"*"float"*"excluded"* ]]
	mlconvert e.mlg -o e.mlt
	grep -q '= Conv ' e.mlt
	grep -q '= Gemm ' e.mlt
}

@test "mlquant --report and --json print the per-layer report: stdout with -o FILE, else stderr" {
	mkcnn
	run -0 --separate-stderr mlquant -c cal.npy --report cnn.onnx -o r.mlg
	[[ $output == *"wSQNR"* ]]
	[[ $output == *"output SQNR"* ]]
	[ -z "$stderr" ]
	run -0 --separate-stderr mlquant -c cal.npy --json cnn.onnx -o r.mlg
	echo "$output" | "$PY" -c "import json,sys; d=json.load(sys.stdin); assert d['layers']"
	# the model on stdout: the report goes to stderr, the model stays whole
	mlquant -c cal.npy --json cnn.onnx >s.mlg 2>s.json
	"$PY" -c "import json,sys; d=json.load(open('s.json')); assert d['layers']"
	cmp s.mlg r.mlg
	mlquant -c cal.npy --report cnn.onnx -o - >t.mlg 2>t.txt
	grep -q wSQNR t.txt
	cmp t.mlg r.mlg
}

@test "mlquant -v says what it read and wrote, and how many layers it quantised" {
	mkcnn
	run -0 --separate-stderr mlquant -v -c cal.npy cnn.onnx -o r.mlg
	[[ ${stderr_lines[0]} == "mlquant: read cnn.onnx: "*" nodes ("*" ms)" ]]
	[[ $stderr == *"mlquant: wrote r.mlg as mlg: "*" nodes ("*" ms)"* ]]
	[[ $stderr == *"mlquant: "*" of "*" layers quantised, constants "*" -> "*" bytes"* ]]
	[ -z "$output" ]
	mlquant -v -c cal.npy --dynamic - <cnn.onnx >d.mlg 2>err.txt
	grep -q '^mlquant: read <stdin>: ' err.txt
	grep -q '^mlquant: wrote <stdout> as mlg: ' err.txt
	run -0 --separate-stderr mlquant -q -v -c cal.npy cnn.onnx -o r.mlg
	[ -z "$stderr" ]
}

@test "mlquant --budget mixes float and int8 layers" {
	mkcnn
	run -0 --separate-stderr mlquant -c cal.npy --budget 200 --report cnn.onnx -o b.mlg
	[[ $output == *"budget"* ]]
	run -0 mlrun b.mlg -i x=x1.npy
}

@test "mlquant --budget never writes a model slower than the float one (injected latencies)" {
	mkcnn
	mlconvert cnn.onnx -o f.mlt
	# int8 slower (2 ms against 1 ms): the float model, unchanged, and mlquant says so
	ML_QUANT_FAKE_LATENCY=1,2 run -0 --separate-stderr mlquant -c cal.npy --budget 10 \
		--json cnn.onnx -o s.mlt
	[[ $stderr == *"not faster than the float one"*"2.000 ms against 1.000 ms"*"wrote the float model"* ]]
	echo "$output" | head -1 | "$PY" -c "import json,sys; d=json.load(sys.stdin); \
assert d['kept_f32'] is True and d['ms_q'] == 2 and d['ms_f32'] == 1; \
assert not any(l['quantized'] for l in d['layers'])"
	cmp f.mlt s.mlt
	# a tie is not a gain: float again
	ML_QUANT_FAKE_LATENCY=1,1 run -0 --separate-stderr mlquant -c cal.npy --budget 10 cnn.onnx \
		-o t.mlt
	cmp f.mlt t.mlt
	# int8 faster: the int8 model
	ML_QUANT_FAKE_LATENCY=2,1 run -0 --separate-stderr mlquant -c cal.npy --budget 10 cnn.onnx \
		-o q.mlt
	[[ $stderr == *"int8 1.000 ms against float 2.000 ms (0.50x): wrote the int8 model"* ]]
	grep -q 'ml.Q8Conv' q.mlt
	# -q says nothing; a malformed value is a usage error
	ML_QUANT_FAKE_LATENCY=1,2 run -0 --separate-stderr mlquant -q -c cal.npy --budget 10 \
		cnn.onnx -o s2.mlt
	[ -z "$stderr" ]
	ML_QUANT_FAKE_LATENCY=1,x run -2 --separate-stderr mlquant -c cal.npy --budget 10 cnn.onnx \
		-o x.mlt
	[[ $stderr == *"ML_QUANT_FAKE_LATENCY must be"* ]]
}

@test "mlquant refuses calibration data that does not fit the model with status 3" {
	mkcnn
	run -3 --separate-stderr mlquant -c bad.npy cnn.onnx -o o.mlg
	[ "${#stderr_lines[@]}" -eq 1 ]
	# the per-sample shapes, not "dim 1 is 4" (the sample count)
	[ "$stderr" = "mlquant: bad.npy: the data are 4 samples of shape [3,5]; input 'x' takes samples of shape [1,28,28]" ]
	"$PY" -c 'import numpy as np; np.save("mnist.npy", np.zeros((100, 28, 28), np.float32)); np.save("s.npy", np.float32(1))'
	run -3 --separate-stderr mlquant -c mnist.npy cnn.onnx -o o.mlg
	[ "$stderr" = "mlquant: mnist.npy: the data are 100 samples of shape [28,28]; input 'x' takes samples of shape [1,28,28]" ]
	run -3 --separate-stderr mlquant -c s.npy cnn.onnx -o o.mlg
	[ "$stderr" = "mlquant: s.npy: the data are a scalar; input 'x' takes samples of shape [1,28,28]" ]
	echo junk >junk.npy
	run -3 --separate-stderr mlquant -c junk.npy cnn.onnx -o o.mlg
	[[ $stderr == "mlquant: "* ]]
	run -3 --separate-stderr mlquant -c missing.npy cnn.onnx -o o.mlg
	[ ! -e o.mlg ]
}

@test "mlquant refuses an unknown dtype with status 2" {
	run -2 --separate-stderr mlquant --dtype int4 -c x.npy m.mlg
	[[ $stderr == "mlquant: unknown dtype 'int4'"* ]]
}

@test "mlquant usage errors exit 2" {
	run -2 --separate-stderr mlquant --bogus
	mkcnn
	run -2 --separate-stderr mlquant cnn.onnx
	[[ $stderr == *"calibration data"* ]]
	run -2 --separate-stderr mlquant --method foo -c x.npy m.onnx
	run -2 --separate-stderr mlquant --qdq --dynamic m.onnx
	run -2 --separate-stderr mlquant --samples 0 -c x.npy m.onnx
	run -2 --separate-stderr mlquant --budget -1 -c x.npy m.onnx
}

@test "mlquant reports a write error to /dev/full with status 1" {
	mkcnn
	run -1 --separate-stderr mlquant -c cal.npy cnn.onnx -o /dev/full
	[[ $stderr == "mlquant: "* ]]
	run -1 --separate-stderr sh -c 'mlquant -c cal.npy cnn.onnx >/dev/full'
}

@test "mlquant refuses a damaged model with status 3" {
	mkcnn
	head -c 100 cnn.onnx >cut.onnx
	run -3 --separate-stderr mlquant -c cal.npy cut.onnx -o o.mlg
	[ ! -e o.mlg ]
}

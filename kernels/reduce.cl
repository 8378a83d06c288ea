/*
 * reduce.cl: reductions over any set of axes (ReduceSum, Mean, Max, Min,
 * Prod, L1, L2, SumSquare, LogSum, LogSumExp). One work-item per output
 * element walks the reduced elements serially, in the CPU kernel's order.
 * The output index is split over the kept dims (od, with strides os into
 * the input) and the reduced index over rd (strides rs). T is the stored
 * type, float or (with -DML_F16) half through vload_half/vstore_half, as
 * in elem.cl; the accumulator is a float either way.
 */
/* T, LD, ST: kernels/prelude.cl */

/* struct ml_red in lib/cl/cl_ops.c: the same layout */
typedef struct {
	long od[8], os[8];
	long rd[8], rs[8];
	long nout, nred;
	int orank, rrank, op, pad_;
} ml_red;

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP };

__kernel void
ml_reduce(__global const T *x, __global T *y, ml_red p)
{
	size_t i = get_global_id(0);
	if (i >= p.nout)
		return;
	long r = i, base = 0;
	for (int d = p.orank - 1; d >= 0; d--) {
		base += (r % p.od[d]) * p.os[d];
		r /= p.od[d];
	}
	float m = -INFINITY;
	if (p.op == R_LOGSUMEXP)
		for (long j = 0; j < p.nred; j++) {
			long q = j, off = base;
			for (int d = p.rrank - 1; d >= 0; d--) {
				off += (q % p.rd[d]) * p.rs[d];
				q /= p.rd[d];
			}
			m = fmax(m, LD(x, off));
		}
	float acc = p.op == R_MAX ? -INFINITY : p.op == R_MIN ? INFINITY : p.op == R_PROD ? 1.0f :
		    0.0f;
	for (long j = 0; j < p.nred; j++) {
		long q = j, off = base;
		for (int d = p.rrank - 1; d >= 0; d--) {
			off += (q % p.rd[d]) * p.rs[d];
			q /= p.rd[d];
		}
		float v = LD(x, off);
		switch (p.op) {
		case R_MAX: acc = fmax(acc, v); break;
		case R_MIN: acc = fmin(acc, v); break;
		case R_PROD: acc *= v; break;
		case R_L1: acc += fabs(v); break;
		case R_L2: case R_SUMSQ: acc += v * v; break;
		case R_LOGSUMEXP: acc += exp(v - m); break;
		default: acc += v; break;
		}
	}
	switch (p.op) {
	case R_MEAN: acc /= (float)p.nred; break;
	case R_L2: acc = sqrt(acc); break;
	case R_LOGSUM: acc = log(acc); break;
	case R_LOGSUMEXP: acc = log(acc) + m; break;
	default: break;
	}
	ST(y, i, acc);
}

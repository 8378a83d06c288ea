/*
 * device.c: the CPU as a device of the executor (lib/exec/device.h).
 * Its buffers are host memory and its copies memcpy; a node runs its CPU
 * kernel (the op's family table, lib/cpu/FAMILY.c). The executor runs
 * every CPU node through this vtable's run with bin and bout NULL: the
 * operands are then the session's own host values (the planned arena),
 * with no copy. With buffers (a caller that treats the CPU as a device
 * like any other), run points the operands at them for the call.
 */
#include "exec/device.h"

struct cpubuf {
	int refs;
	size_t n;
	_Alignas(64) unsigned char data[];
};

static int
cpu_open(int index, void **ctx, struct ml_err *e)
{
	if (index != 0)
		return ml_fail(e, ML_ENODEV, "there is one CPU device");
	*ctx = NULL;
	return 0;
}

static const char *
cpu_describe(void *ctx)
{
	(void)ctx;
	return "cpu";
}

static bool
cpu_supports(void *ctx, const struct ml_graph *g, const struct ml_node *n)
{
	(void)ctx;
	(void)g;
	return ml_cpu_kernel_get(n->op) != NULL;
}

static int
cpu_prepare(void *ctx, const struct ml_graph *g, const struct ml_node *n, struct ml_err *e)
{
	(void)ctx, (void)g, (void)n, (void)e;
	return 0;
}

static unsigned
cpu_host_inputs(const struct ml_node *n)
{
	(void)n;
	return ~0u;
}

static bool
cpu_view(const struct ml_node *n)
{
	(void)n;
	return false;
}

static int
cpu_alloc(void *ctx, size_t n, void **buf, struct ml_err *e)
{
	(void)ctx;
	struct cpubuf *b = ml_malloc(sizeof *b + (n ? n : 1));
	if (b == NULL)
		return ml_fail(e, ML_ENOMEM, "cannot allocate %zu bytes", n);
	b->refs = 1;
	b->n = n;
	*buf = b;
	return 0;
}

static void
cpu_retain(void *ctx, void *buf)
{
	(void)ctx;
	((struct cpubuf *)buf)->refs++;
}

static void
cpu_free(void *ctx, void *buf)
{
	(void)ctx;
	struct cpubuf *b = buf;
	if (b != NULL && --b->refs == 0)
		ml_free(b);
}

static int
cpu_upload(void *ctx, void *buf, const void *src, size_t n, struct ml_err *e)
{
	(void)ctx, (void)e;
	memcpy(((struct cpubuf *)buf)->data, src, n);
	return 0;
}

static int
cpu_download(void *ctx, void *buf, void *dst, size_t n, struct ml_err *e)
{
	(void)ctx, (void)e;
	memcpy(dst, ((struct cpubuf *)buf)->data, n);
	return 0;
}

static int
cpu_run(void *ctx, struct ml_opctx *c, void **bin, void **bout)
{
	(void)ctx;
	void *save_in[64], *save_out[64];
	if (bin == NULL && bout == NULL)
		return ml_cpu_kernel_get(c->node->op)(c);
	if (c->n_in > 64 || c->n_out > 64)
		return ml_opfail(c, ML_ENOTSUP, "too many operands");
	for (int j = 0; j < c->n_in; j++)
		if (c->in[j] != NULL) {
			save_in[j] = c->in[j]->data;
			if (bin[j] != NULL)
				c->in[j]->data = ((struct cpubuf *)bin[j])->data;
		}
	for (int j = 0; j < c->n_out; j++) {
		save_out[j] = c->out[j]->data;
		if (bout[j] != NULL)
			c->out[j]->data = ((struct cpubuf *)bout[j])->data;
	}
	int rc = ml_cpu_kernel_get(c->node->op)(c);
	for (int j = 0; j < c->n_in; j++)
		if (c->in[j] != NULL)
			c->in[j]->data = save_in[j];
	for (int j = 0; j < c->n_out; j++)
		c->out[j]->data = save_out[j];
	return rc;
}

static int
cpu_sync(void *ctx, struct ml_err *e)
{
	(void)ctx, (void)e;
	return 0;
}

const struct ml_devops ml_cpu_devops = {
	.name = "cpu",
	.open = cpu_open,
	.describe = cpu_describe,
	.supports = cpu_supports,
	.prepare = cpu_prepare,
	.host_inputs = cpu_host_inputs,
	.view = cpu_view,
	.alloc = cpu_alloc,
	.retain = cpu_retain,
	.free = cpu_free,
	.upload = cpu_upload,
	.download = cpu_download,
	.run = cpu_run,
	.sync = cpu_sync,
};

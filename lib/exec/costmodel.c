/*
 * costmodel.c: the measured cost model of --device auto: rows of per-op
 * sums per device, read from and written to the cache folder's
 * costmodel.txt (or mlprof --calibrate's JSON), and the predictions made
 * from them. See costmodel.h.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/costmodel.h"
#include "exec/session.h"

/* ml_cm_key: the cost model's key of node n: its op type, or its class */
const char *
ml_cm_key(const struct ml_node *n, char *buf, size_t len)
{
	if (n->op == ML_OP_CONV && ml_attr_int(n, "group", 1) > 1) {
		snprintf(buf, len, "%s:group", n->op_type);
		return buf;
	}
	return n->op_type;
}


void
ml_cm_path(char *buf, size_t n)
{
	const char *f = getenv("ML_COSTMODEL");
	if (f != NULL && f[0] != '\0') {
		snprintf(buf, n, "%s", f);
		return;
	}
	const char *c = getenv("ML_CL_CACHE");
	const char *x = getenv("XDG_CACHE_HOME");
	const char *h = getenv("HOME");
	if (c != NULL && strcmp(c, "0") != 0 && c[0] != '\0')
		snprintf(buf, n, "%s/costmodel.txt", c);
	else if (x != NULL && x[0] == '/')
		snprintf(buf, n, "%s/ml/costmodel.txt", x);
	else if (h != NULL && h[0] != '\0')
		snprintf(buf, n, "%s/.cache/ml/costmodel.txt", h);
	else
		buf[0] = '\0';
}

struct ml_cm_row *
ml_cm_find(struct ml_costmodel *cm, const char *dev, const char *op, bool add)
{
	for (int i = 0; i < cm->n; i++)
		if (strcmp(cm->rows[i].dev, dev) == 0 && strcmp(cm->rows[i].op, op) == 0)
			return &cm->rows[i];
	if (!add)
		return NULL;
	if (cm->n == cm->cap) {
		int cap = cm->cap ? 2 * cm->cap : 64;
		struct ml_cm_row *r = ml_realloc(cm->rows, sizeof *r * (size_t)cap);
		if (r == NULL)
			return NULL;
		cm->rows = r;
		cm->cap = cap;
	}
	struct ml_cm_row *r = &cm->rows[cm->n++];
	memset(r, 0, sizeof *r);
	snprintf(r->dev, sizeof r->dev, "%s", dev);
	snprintf(r->op, sizeof r->op, "%s", op);
	return r;
}

void
ml_cm_load(struct ml_costmodel *cm)
{
	char path[4096];
	ml_cm_path(path, sizeof path);
	size_t pl = strlen(path);
	if (pl > 5 && strcmp(path + pl - 5, ".json") == 0)
		return;		/* read by ml_cm_load_json */
	FILE *fp = path[0] ? fopen(path, "r") : NULL;
	if (fp == NULL)
		return;
	char line[512];
	while (fgets(line, sizeof line, fp) != NULL) {
		char dev[64], op[48];
		double ns, fl, by, mn = 0;
		long long nodes;
		if (line[0] == '#' ||
		    sscanf(line, "%63s %47s %lf %lf %lf %lld %lf", dev, op, &ns, &fl, &by, &nodes,
			   &mn) < 6)
			continue;
		struct ml_cm_row *r = ml_cm_find(cm, dev, op, true);
		if (r != NULL) {
			r->sum_ns = ns;
			r->sum_flops = fl;
			r->sum_bytes = by;
			r->nodes = nodes;
			r->min_ns = mn >= 0 ? mn : 0;
		}
	}
	fclose(fp);
}

void
ml_cm_save(struct ml_costmodel *cm)
{
	char path[4096], dir[4096];
	ml_cm_path(path, sizeof path);
	size_t pl = strlen(path);
	if (!cm->changed || path[0] == '\0' || (pl > 5 && strcmp(path + pl - 5, ".json") == 0))
		return;		/* mlprof's JSON model is read, never rewritten */
	snprintf(dir, sizeof dir, "%s", path);
	char *sl = strrchr(dir, '/');
	if (sl != NULL) {
		*sl = '\0';
		for (char *p = dir + 1; *p; p++)
			if (*p == '/') {
				*p = '\0';
				mkdir(dir, 0755);
				*p = '/';
			}
		mkdir(dir, 0755);
	}
	size_t cap = 128 + (size_t)cm->n * 200, len = 0;
	char *buf = ml_malloc(cap);
	if (buf == NULL)
		return;
	len += (size_t)snprintf(buf + len, cap - len,
				"# ml cost model: device op sum_ns sum_flops sum_bytes nodes min_ns\n");
	for (int i = 0; i < cm->n; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s %s %.6g %.6g %.6g %lld %.6g\n",
					cm->rows[i].dev, cm->rows[i].op, cm->rows[i].sum_ns,
					cm->rows[i].sum_flops, cm->rows[i].sum_bytes,
					(long long)cm->rows[i].nodes, cm->rows[i].min_ns);
	struct ml_err e = { 0 };
	ml_write_atomic(path, buf, len, &e);
	ml_free(buf);
}

/*
 * ml_cm_load_json: add the rows of a cost model of mlprof --calibrate
 * (ml_prof_write_costmodel: {"devices": {"cpu": {"ops": {"Conv": {"nodes":
 * N, "flops": F, "bytes": B, "ns": T, ...}}}, "cl:0": ...}}) that the model
 * lacks. "cl:N" rows are this session's device when N is its index.
 */
void
ml_cm_load_json(struct ml_costmodel *cm, const char *path, int cl_index, const char *cl_name)
{
	uint8_t *buf;
	size_t len;
	struct ml_err e = { 0 };
	if (access(path, R_OK) != 0 || ml_read_file(path, &buf, &len, &e) < 0)
		return;
	char *p = (char *)buf;
	if (strstr(p, "\"ml-costmodel\"") == NULL) {
		ml_free(buf);
		return;
	}
	char *q = strstr(p, "\"devices\"");
	while (q != NULL && (q = strstr(q, "\"runs\"")) != NULL) {
		/* the device key is the string before this object */
		char *k = q;
		while (k > p && *k != '{')
			k--;
		char *ke = k;
		while (ke > p && *ke != '"')
			ke--;
		char *ks = ke - 1;
		while (ks > p && *ks != '"')
			ks--;
		char dev[64] = "";
		if (ke > ks && (size_t)(ke - ks - 1) < sizeof dev)
			memcpy(dev, ks + 1, (size_t)(ke - ks - 1));
		if (strncmp(dev, "cl:", 3) == 0) {
			if (atoi(dev + 3) != cl_index || cl_name == NULL)
				dev[0] = '\0';
			else
				snprintf(dev, sizeof dev, "%s", cl_name);
		}
		char *ops = strstr(q, "\"ops\"");
		char *next = strstr(q + 6, "\"runs\"");
		if (ops == NULL)
			break;
		for (char *o = strchr(ops + 6, '"'); o != NULL && (next == NULL || o < next);) {
			char op[48];
			long long nodes, fl, by;
			double ns;
			if (sscanf(o, "\"%47[^\"]\": {\"nodes\": %lld, \"flops\": %lld, \"bytes\": %lld, "
				   "\"ns\": %lf", op, &nodes, &fl, &by, &ns) == 5 && dev[0] != '\0' &&
			    ml_cm_find(cm, dev, op, false) == NULL) {
				struct ml_cm_row *r = ml_cm_find(cm, dev, op, true);
				if (r != NULL) {
					r->sum_ns = ns;
					r->sum_flops = (double)fl;
					r->sum_bytes = (double)by;
					r->nodes = nodes;
				}
			}
			char *end = strchr(o, '}');
			if (end == NULL)
				break;
			o = strchr(end, '"');
			if (o != NULL && strncmp(o, "\"runs\"", 6) == 0)
				break;
		}
		q = next;
	}
	ml_free(buf);
}

/*
 * ml_cm_predict: microseconds for a node of op (a ml_cm_key, else base, the op
 * type) with fl FLOPs and by bytes; -1 when unknown.
 */
double
ml_cm_predict(struct ml_costmodel *cm, const char *dev, const char *op, const char *base,
	      double fl, double by)
{
	struct ml_cm_row *r = ml_cm_find(cm, dev, op, false);
	if ((r == NULL || r->nodes == 0) && base != NULL)
		r = ml_cm_find(cm, dev, base, false);
	if (r == NULL || r->nodes == 0)
		return -1;
	/* what scales (a row measured on big nodes says little of a small one's fixed cost) */
	double per_node = r->sum_ns / (double)r->nodes;
	double ns;
	if (r->sum_flops > 0 && fl > 0)
		ns = fl * r->sum_ns / r->sum_flops;
	else if (r->sum_bytes > 0 && by > 0)
		ns = by * r->sum_ns / r->sum_bytes;
	else
		ns = per_node;
	return ns * 1e-3;
}

/*
 * ml_cm_launch: the host's microseconds per node launched on dev beyond its
 * own time, and in *floor the least microseconds a kernel took there
 */
double
ml_cm_launch(struct ml_costmodel *cm, const char *dev, double *floor)
{
	struct ml_cm_row *r = ml_cm_find(cm, dev, ML_CM_LAUNCH, false);
	*floor = r != NULL ? r->min_ns * 1e-3 : 0;
	return r != NULL && r->nodes > 0 && r->sum_ns > 0 ? r->sum_ns / (double)r->nodes * 1e-3 : 0;
}


/* ml_cm_add: add the times t[] of the nodes i with nd[i] == want and missing[i] to dev's rows */
void
ml_cm_add(struct ml_costmodel *cm, struct ml_session *s, const char *dev, const int *nd,
	  int want, bool *missing, const double *t)
{
	const struct ml_graph *g = s->g;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		if (nd[i] != want || !missing[i])
			continue;
		char kb[64];
		struct ml_cm_row *r = ml_cm_find(cm, dev, ml_cm_key(n, kb, sizeof kb), true);
		if (r == NULL)
			continue;
		double ns = t[i] * 1e9;
		r->min_ns = r->nodes == 0 || ns < r->min_ns ? ns : r->min_ns;
		r->sum_ns += ns;
		r->sum_flops += (double)s->node_flops[i];
		r->sum_bytes += (double)s->node_bytes[i];
		r->nodes++;
		cm->changed = true;
	}
}

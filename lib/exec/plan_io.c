/*
 * plan_io.c: a session's placement for people and scripts: a table or
 * JSON of each node's device and predicted cost (mlrun --plan), and the
 * reading of such a plan, or of "NODE DEVICE" lines, back (--plan-file).
 */
#include <stdio.h>

#include "exec/device.h"
#include "exec/session.h"

static const char *
dev_id(int d, char *buf, size_t n)
{
	if (d == 0)
		snprintf(buf, n, "cpu");
	else
		snprintf(buf, n, "cl:%d", d - 1);
	return buf;
}

int
ml_session_plan_write(const struct ml_session *s, FILE *fp, bool json, struct ml_err *e)
{
	const struct ml_graph *g = s->g;
	const struct ml_hx *hx = s->hx;
	int *nd = ml_calloc((size_t)g->n_nodes + 1, sizeof *nd);
	if (nd == NULL)
		return ml_fail(e, ML_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_nodes; i++)
		nd[i] = hx != NULL ? hx->node_dev[i] : 0;
	double total = 0, moved = 0;
	char id[16];
	if (json)
		fprintf(fp, "{\"device\": \"%s\", \"nodes\": [", s->o.device ? s->o.device : "cpu");
	else
		fprintf(fp, "%-5s %-28s %-20s %-6s %12s %12s\n", "node", "name", "op", "device",
			"cost_us", "bytes_in");
	for (int i = 0; i < g->n_nodes; i++) {
		const struct ml_node *n = &g->nodes[i];
		double us = hx == NULL ? 0 : nd[i] ? hx->cost_dev[i] : hx->cost_cpu[i];
		int64_t in_bytes = 0;
		for (int j = 0; j < n->n_in; j++) {
			int t = n->in[j];
			if (t < 0 || hx == NULL)
				continue;
			int p = g->tensors[t]->producer;
			int where = p >= 0 ? nd[p] : 0;
			bool host = nd[i] && ml_host_input(hx->ops->host_inputs(n), j);
			if (ml_is_stored(g, t) || host ? (host && where) : where != nd[i])
				in_bytes += ml_tensor_bytes(g, t);
		}
		total += us;
		moved += (double)in_bytes;
		if (json) {
			fprintf(fp, "%s\n  {\"index\": %d, \"name\": ", i ? "," : "", i);
			ml_json_str(fp, n->name);
			fprintf(fp, ", \"op\": ");
			ml_json_str(fp, n->op_type);
			fprintf(fp, ", \"device\": \"%s\", \"supported\": %s, \"cost_us\": %.3f, "
				"\"bytes_in\": %lld}", dev_id(nd[i], id, sizeof id),
				hx != NULL && hx->node_ok[i] ? "true" : "false", us,
				(long long)in_bytes);
		} else {
			fprintf(fp, "%-5d %-28.28s %-20.20s %-6s %12.1f %12lld\n", i, n->name,
				n->op_type, dev_id(nd[i], id, sizeof id), us, (long long)in_bytes);
		}
	}
	int64_t out_bytes = 0;
	for (int i = 0; i < g->n_outputs; i++) {
		int p = g->tensors[g->outputs[i]]->producer;
		if (p >= 0 && nd[p])
			out_bytes += ml_tensor_bytes(g, g->outputs[i]);
	}
	moved += (double)out_bytes;
	double pred = hx != NULL ? ml_hx_predicted(s, nd, NULL) : total;
	bool how = hx != NULL && hx->how[0] && hx->note[0] == '\0';
	if (json) {
		fprintf(fp, "\n], \"bytes_moved\": %.0f, \"predicted_us\": %.3f%s%s%s", moved,
			pred, hx != NULL && hx->note[0] ? ", \"note\": \"" : "",
			hx != NULL && hx->note[0] ? "fallback" : "",
			hx != NULL && hx->note[0] ? "\"" : "");
		if (how) {
			fprintf(fp, ", \"auto\": ");
			ml_json_str(fp, hx->how);
		}
		fprintf(fp, "}\n");
	} else {
		if (how)
			fprintf(fp, "auto: %s\n", hx->how);
		fprintf(fp, "total: %d nodes, %.0f bytes moved between devices, predicted %.1f us\n",
			g->n_nodes, moved, pred);
	}
	ml_free(nd);
	return 0;
}

static int
parse_dev(const char *s, int *out)
{
	if (strcmp(s, "cpu") == 0) {
		*out = 0;
		return 0;
	}
	if (strcmp(s, "cl") == 0) {
		*out = 1;
		return 0;
	}
	if (strncmp(s, "cl:", 3) == 0) {
		char *end;
		long v = strtol(s + 3, &end, 10);
		if (*end == '\0' && end != s + 3 && v >= 0 && v < 1000) {
			*out = (int)v + 1;
			return 0;
		}
	}
	return -1;
}

int
ml_placement_read(const struct ml_graph *g, const char *path, int *dev, struct ml_err *e)
{
	uint8_t *buf;
	size_t len;
	ML_TRY(ml_read_file(path, &buf, &len, e));
	char *p = (char *)buf;
	int rc = 0;
	if (strstr(p, "\"nodes\"") != NULL) {
		/* the JSON of ml_session_plan_write: index and device of each node */
		char *q = p;
		while ((q = strstr(q, "\"index\":")) != NULL) {
			long idx = strtol(q + 8, &q, 10);
			char *d = strstr(q, "\"device\":");
			char *nx = strstr(q, "\"index\":");
			if (d == NULL || (nx != NULL && d > nx)) {
				rc = ml_fail(e, ML_EINVAL, "%s: node %ld has no device", path, idx);
				break;
			}
			d = strchr(d + 9, '"');
			char id[32] = "";
			if (d != NULL)
				sscanf(d + 1, "%31[^\"]", id);
			int v;
			if (idx < 0 || idx >= g->n_nodes) {
				rc = ml_fail(e, ML_EINVAL, "%s: no node %ld in the graph (%d nodes)",
					     path, idx, g->n_nodes);
				break;
			}
			if (parse_dev(id, &v) < 0) {
				rc = ml_fail(e, ML_EINVAL, "%s: node %ld: unknown device '%s'", path,
					     idx, id);
				break;
			}
			dev[idx] = v;
		}
		ml_free(buf);
		return rc;
	}
	int lineno = 0;
	for (char *line = strtok(p, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		lineno++;
		char *h = strchr(line, '#');
		if (h != NULL)
			*h = '\0';
		char name[512], id[32];
		int k = sscanf(line, "%511s %31s", name, id);
		if (k <= 0)
			continue;
		if (k != 2) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: expected 'NODE DEVICE'", path, lineno);
			break;
		}
		int v, ni = -1;
		if (parse_dev(id, &v) < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: unknown device '%s'", path, lineno, id);
			break;
		}
		for (int i = 0; i < g->n_nodes && ni < 0; i++)
			if (strcmp(g->nodes[i].name, name) == 0)
				ni = i;
		if (ni < 0) {
			char *end;
			long x = strtol(name, &end, 10);
			if (*end == '\0' && x >= 0 && x < g->n_nodes)
				ni = (int)x;
		}
		if (ni < 0) {
			rc = ml_fail(e, ML_EINVAL, "%s:%d: no node '%s' in the graph", path, lineno,
				     name);
			break;
		}
		dev[ni] = v;
	}
	ml_free(buf);
	return rc;
}

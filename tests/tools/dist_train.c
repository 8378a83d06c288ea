/*
 * dist_train.c: a small data-parallel trainer for the tests and the bench
 * of lib/dist: trains a model (an .mlt/.mlg/.onnx image classifier, e.g.
 * examples/fashion-mlp.mlt) on an image dataset (e.g. Fashion-MNIST) for
 * K steps of one global batch each, distributed over the ranks when run
 * under mpirun, and writes the trained parameters (rank 0 only). Run
 * alone and under `mpirun -np 2` with the same global batch, the two
 * results must agree within float tolerance (tests/7500-mpi.bats).
 * This is the integration mltrain makes, in as few lines as it takes.
 *
 * usage: dist_train [options] MODEL DATA
 *   -k, --steps K         steps (default 20)
 *   -b, --batch B         global batch: samples per step over all ranks (default 64)
 *   --bucket-mb M         all-reduce bucket size in MiB (default 25)
 *   --lr LR, --momentum M, --optimizer sgd|adam, --seed S
 *   --limit N             use only the first N training samples
 *   -j, --threads T       compute threads per rank (default: cores / ranks on the host)
 *   -o FILE               the trained model (.mlg), written by rank 0 atomically
 *   --params-dir DIR      every trained parameter as DIR/NAME.npy (rank 0)
 *   --mpi / --no-mpi      require MPI (a world of one without a launcher) / never use it
 *   --check               print the largest parameter difference between ranks
 *   --json                print the summary as JSON (rank 0)
 * Exit status as the tools': 0, 1 runtime failure, 2 usage, 3 bad input, 4 unsupported.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ml.h"

static const char *prog = "dist_train";

static void
usage(void)
{
	fprintf(stderr, "usage: %s [-k steps] [-b batch] [--bucket-mb M] [--lr LR] [--momentum M] "
		"[--optimizer sgd|adam] [--seed S] [--limit N] [-j threads] [-o model.mlg] "
		"[--params-dir DIR] [--mpi | --no-mpi] [--check] [--json] MODEL DATA\n", prog);
	exit(2);
}

static double
num(const char *s, const char *what)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0') {
		fprintf(stderr, "%s: bad %s '%s'\n", prog, what, s);
		usage();
	}
	return v;
}

/* die: report e, end every rank, exit with the tool status of code. */
static void
die(int code, const struct ml_err *e)
{
	fprintf(stderr, "%s: %s\n", prog, e->msg);
	int st = ml_exit_status(code);
	if (ml_dist_size() > 1)
		ml_dist_abort(st);
	exit(st);
}

/* save_params: each PARAM of g as DIR/NAME.npy ('/' in names becomes '_'). */
static int
save_params(const struct ml_graph *g, const char *dir, struct ml_err *e)
{
	if (mkdir(dir, 0777) < 0 && access(dir, W_OK) < 0)
		return ml_fail(e, ML_EIO, "cannot make '%s'", dir);
	for (int t = 0; t < g->n_tensors; t++) {
		const struct ml_tensor *ten = g->tensors[t];
		if (ten->kind != ML_TK_PARAM || ten->data == NULL || !ml_dtype_is_float(ten->dtype))
			continue;
		if (g->train != NULL) {
			bool slot = false;
			for (int i = 0; i < g->train->n_slots; i++)
				slot |= g->train->slots[i] == t;
			if (slot)
				continue;
		}
		char path[1024], name[512];
		snprintf(name, sizeof name, "%s", ten->name);
		for (char *p = name; *p; p++)
			if (*p == '/')
				*p = '_';
		snprintf(path, sizeof path, "%s/%s.npy", dir, name);
		struct ml_tval v;
		ml_graph_tval(g, t, &v);
		ML_TRY(ml_npy_save(&v, path, e));
	}
	return 0;
}

int
main(int argc, char **argv)
{
	enum { O_BUCKET = 256, O_LR, O_MOM, O_OPT, O_SEED, O_LIMIT, O_PARAMS, O_MPI, O_NOMPI,
	       O_CHECK, O_JSON };
	static const struct option longs[] = {
		{ "steps", required_argument, NULL, 'k' },
		{ "batch", required_argument, NULL, 'b' },
		{ "bucket-mb", required_argument, NULL, O_BUCKET },
		{ "lr", required_argument, NULL, O_LR },
		{ "momentum", required_argument, NULL, O_MOM },
		{ "optimizer", required_argument, NULL, O_OPT },
		{ "seed", required_argument, NULL, O_SEED },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "threads", required_argument, NULL, 'j' },
		{ "output", required_argument, NULL, 'o' },
		{ "params-dir", required_argument, NULL, O_PARAMS },
		{ "mpi", no_argument, NULL, O_MPI },
		{ "no-mpi", no_argument, NULL, O_NOMPI },
		{ "check", no_argument, NULL, O_CHECK },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	int64_t steps = 20, batch = 64, limit = 0;
	double lr = 0.05, momentum = 0.9;
	uint64_t seed = 1;
	int optim = ML_OPTIM_SGD, threads = 0, mode = ML_DIST_AUTO, c;
	bool check = false, json = false;
	const char *out = NULL, *pdir = NULL;
	struct ml_dist_opts dopt;
	struct ml_err e = { 0 };
	int rc;

	ml_dist_opts_init(&dopt);
	while ((c = getopt_long(argc, argv, "k:b:j:o:", longs, NULL)) != -1) {
		switch (c) {
		case 'k': steps = (int64_t)num(optarg, "step count"); break;
		case 'b': batch = (int64_t)num(optarg, "batch"); break;
		case 'j': threads = (int)num(optarg, "thread count"); break;
		case 'o': out = optarg; break;
		case O_BUCKET: dopt.bucket_mb = num(optarg, "bucket size"); break;
		case O_LR: lr = num(optarg, "learning rate"); break;
		case O_MOM: momentum = num(optarg, "momentum"); break;
		case O_OPT:
			if ((optim = ml_optim_from_name(optarg)) < 0) {
				fprintf(stderr, "%s: unknown optimizer '%s'\n", prog, optarg);
				usage();
			}
			break;
		case O_SEED: seed = (uint64_t)num(optarg, "seed"); break;
		case O_LIMIT: limit = (int64_t)num(optarg, "limit"); break;
		case O_PARAMS: pdir = optarg; break;
		case O_MPI: mode = ML_DIST_REQUIRE; break;
		case O_NOMPI: mode = ML_DIST_OFF; break;
		case O_CHECK: check = true; break;
		case O_JSON: json = true; break;
		default: usage();
		}
	}
	if (argc - optind != 2 || steps < 1 || batch < 1 || limit < 0)
		usage();
	const char *model_path = argv[optind], *data_path = argv[optind + 1];

	struct ml_dist_info di;
	if ((rc = ml_dist_init(mode, &di, &e)) < 0)
		die(rc, &e);
	if (batch < di.size) {
		fprintf(stderr, "%s: a global batch of %lld is less than one sample per rank (%d)\n",
			prog, (long long)batch, di.size);
		if (di.size > 1)
			ml_dist_abort(2);
		return 2;
	}
	if (threads <= 0) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		long per = cores / (di.local_size > 0 ? di.local_size : 1);
		threads = per > 1 ? (int)per : 1;
	}
	ml_set_threads(threads);

	struct ml_graph *model = NULL, *step = NULL;
	struct ml_dataset *train = NULL;
	struct ml_session *s = NULL;
	struct ml_loader *ld = NULL;
	if ((rc = ml_model_load(&model, model_path, ML_FMT_AUTO, &e)) < 0 ||
	    (rc = ml_data_load(&train, NULL, data_path, &e)) < 0)
		die(rc, &e);
	if (limit > 0 && limit < train->n)
		train->n = limit;
	/* the batch specs from the model's first input and output: [N, dims...] and [N, classes] */
	const struct ml_tensor *xin = model->tensors[model->inputs[0]];
	const struct ml_tensor *yout = model->tensors[model->outputs[0]];
	struct ml_batch_spec xs = { .dtype = ML_F32, .rank = xin->rank - 1 };
	struct ml_batch_spec ys = { .dtype = ML_I64, .rank = 0 };
	for (int d = 1; d < xin->rank; d++)
		xs.dims[d - 1] = xin->dims[d];
	int64_t classes = yout->rank == 2 ? yout->dims[1] : 0;
	if ((rc = ml_dataset_check(train, &xs, &ys, classes, &e)) < 0)
		die(rc, &e);

	struct ml_train_opts to;
	ml_train_opts_init(&to);
	to.optimizer = optim;
	to.momentum = optim == ML_OPTIM_SGD ? momentum : 0;
	to.seed = seed;
	if ((rc = ml_train_step_graph(&step, model, &to, &e)) < 0)
		die(rc, &e);
	/* distribution: buckets into the step graph, rank 0's weights everywhere */
	int nb = ml_train_distribute(step, &dopt, &e);
	if (nb < 0)
		die(nb, &e);
	if ((rc = ml_dist_bcast_params(step, 0, &e)) < 0)
		die(rc, &e);
	struct ml_loader_opts lo = { .batch = batch, .shuffle = true, .drop_last = true,
				     .prefetch = true, .seed = seed, .x = xs, .y = ys };
	if ((rc = ml_session_new(&s, step, NULL, &e)) < 0 ||
	    (rc = ml_loader_new(&ld, train, &lo, &e)) < 0)
		die(rc, &e);
	if (ml_loader_batches(ld) < 1) {
		fprintf(stderr, "%s: %s: fewer samples than one batch\n", prog, data_path);
		if (di.size > 1)
			ml_dist_abort(3);
		return 3;
	}
	struct ml_tval lrv = { 0 };
	if ((rc = ml_tval_alloc(&lrv, ML_F32, 0, NULL, &e)) < 0)
		die(rc, &e);
	*(float *)lrv.data = (float)lr;

	uint64_t epoch = 0;
	double loss_sum = 0, last_loss = 0, t0 = 0;
	if ((rc = ml_loader_start(ld, epoch, 0, &e)) < 0)
		die(rc, &e);
	for (int64_t k = 0; k < steps; k++) {
		const struct ml_tval *x, *y;
		if ((rc = ml_loader_next(ld, &x, &y, &e)) == 0) {
			if ((rc = ml_loader_start(ld, ++epoch, 0, &e)) < 0)
				die(rc, &e);
			rc = ml_loader_next(ld, &x, &y, &e);
		}
		if (rc < 0)
			die(rc, &e);
		/* this rank's rows of the global batch, and its share of the mean */
		struct ml_tval xv, yv;
		double w;
		ml_dist_shard_batch(x, &xv, &w);
		ml_dist_shard_batch(y, &yv, NULL);
		ml_dist_set_weight(w);
		if (k == 1) {
			/* the first step plans memory and warms up; time the rest */
			ml_dist_stats_reset();
			t0 = ml_now();
		}
		if ((rc = ml_session_set_input(s, xin->name, &xv, &e)) < 0 ||
		    (rc = ml_session_set_input(s, "label", &yv, &e)) < 0 ||
		    (rc = ml_session_set_input(s, "lr", &lrv, &e)) < 0 ||
		    (rc = ml_session_run(s, &e)) < 0)
			die(rc, &e);
		const struct ml_tval *l = ml_session_output(s, 0);
		/* the global batch's mean loss: the ranks' means weighted by their shares */
		double gl = ml_get_f64(l->data, l->dtype, 0) * w;
		if ((rc = ml_dist_allreduce(&gl, 1, ML_F64, ML_DIST_SUM, &e)) < 0)
			die(rc, &e);
		loss_sum += gl;
		last_loss = gl;
	}
	double wall = steps > 1 ? ml_now() - t0 : 0;
	struct ml_dist_stats st;
	ml_dist_stats(&st);
	double maxdiff = 0;
	if (check && (rc = ml_dist_param_divergence(step, 0, &maxdiff, &e)) < 0)
		die(rc, &e);
	if ((rc = ml_train_export(model, step, &e)) < 0)
		die(rc, &e);
	if (di.rank == 0) {
		if (out != NULL && (rc = ml_model_save(model, out, ML_FMT_MLG, &e)) < 0)
			die(rc, &e);
		if (pdir != NULL && (rc = save_params(model, pdir, &e)) < 0)
			die(rc, &e);
		int64_t timed = steps - 1;
		double sps = wall > 0 ? (double)(timed * batch) / wall : 0;
		double share = wall > 0 ? (st.wait_s) / wall : 0;
		if (json)
			printf("{\"ranks\": %d, \"threads\": %d, \"steps\": %lld, \"batch\": %lld, "
			       "\"buckets\": %d, \"samples_per_s\": %.2f, \"step_ms\": %.3f, "
			       "\"comm_ms_per_step\": %.3f, \"wait_ms_per_step\": %.3f, "
			       "\"comm_share\": %.4f, \"wait_share\": %.4f, \"loss\": %.6f, "
			       "\"mean_loss\": %.6f, \"max_param_diff\": %g}\n",
			       di.size, threads, (long long)steps, (long long)batch, nb, sps,
			       timed > 0 ? 1e3 * wall / (double)timed : 0,
			       timed > 0 ? 1e3 * st.comm_s / (double)timed : 0,
			       timed > 0 ? 1e3 * st.wait_s / (double)timed : 0,
			       wall > 0 ? st.comm_s / wall : 0, share, last_loss,
			       loss_sum / (double)steps, maxdiff);
		else
			printf("ranks %d  threads %d  steps %lld  global batch %lld  buckets %d\n"
			       "samples/s %.1f  comm %.3f ms/step  wait %.3f ms/step (%.1f%% of the step)\n"
			       "loss %.6f  mean loss %.6f%s\n",
			       di.size, threads, (long long)steps, (long long)batch, nb, sps,
			       timed > 0 ? 1e3 * st.comm_s / (double)timed : 0,
			       timed > 0 ? 1e3 * st.wait_s / (double)timed : 0, 100 * share,
			       last_loss, loss_sum / (double)steps, check ? "" : "");
		if (check)
			printf("max parameter difference between ranks %g\n", maxdiff);
		fflush(stdout);
	}
	ml_tval_clear(&lrv);
	ml_loader_free(ld);
	ml_session_free(s);
	ml_graph_free(step);
	ml_graph_free(model);
	ml_dataset_free(train);
	/* the others wait until rank 0 has written, then MPI ends */
	if ((rc = ml_dist_barrier(&e)) < 0 || (rc = ml_dist_finalize(&e)) < 0)
		die(rc, &e);
	return 0;
}

/*
 * schedule.c: learning-rate schedules (struct ml_lr_schedule): the rate of
 * each optimizer step, constant, in steps, on a cosine, with a linear
 * warm-up. The training-step graph takes the rate as its "lr" input, so a
 * schedule never rebuilds it. See lib/ml_train.h for the contracts.
 */
#include <math.h>
#include <string.h>

#include "ml.h"

static const char *const lr_names[] = { "constant", "step", "cosine", "warmup" };
#define N_LR_KINDS ((int)(sizeof lr_names / sizeof lr_names[0]))

void
ml_lr_schedule_init(struct ml_lr_schedule *s)
{
	memset(s, 0, sizeof *s);
	s->kind = ML_LR_CONSTANT;
	s->lr = 0.01;
	s->step_epochs = 1;
	s->gamma = 0.1;
}

const char *
ml_lr_schedule_name(int kind)
{
	return kind >= 0 && kind < N_LR_KINDS ? lr_names[kind] : NULL;
}

int
ml_lr_schedule_from_name(const char *name)
{
	for (int i = 0; name != NULL && i < N_LR_KINDS; i++)
		if (strcmp(name, lr_names[i]) == 0)
			return i;
	return -1;
}

int
ml_lr_schedule_check(const struct ml_lr_schedule *s, struct ml_err *e)
{
	if (ml_lr_schedule_name(s->kind) == NULL)
		return ml_fail(e, ML_EINVAL, "unknown learning-rate schedule %d", s->kind);
	if (!isfinite(s->lr) || !isfinite(s->gamma) || !isfinite(s->lr_min))
		return ml_fail(e, ML_EINVAL, "learning-rate schedule: a rate is not finite");
	if (s->warmup < 0)
		return ml_fail(e, ML_EINVAL, "learning-rate schedule: %lld warm-up steps",
			       (long long)s->warmup);
	if (s->kind == ML_LR_STEP && (s->steps_per_epoch < 1 || s->step_epochs < 1))
		return ml_fail(e, ML_EINVAL, "step schedule: %lld steps an epoch, decay every %lld "
			       "epochs (both must be at least 1)", (long long)s->steps_per_epoch,
			       (long long)s->step_epochs);
	if (s->kind == ML_LR_COSINE && (s->steps_per_epoch < 0 || s->epochs < 0))
		return ml_fail(e, ML_EINVAL, "cosine schedule: %lld epochs of %lld steps",
			       (long long)s->epochs, (long long)s->steps_per_epoch);
	return 0;
}

double
ml_lr_at(const struct ml_lr_schedule *s, uint64_t step)
{
	double lr = s->lr, total = (double)s->epochs * (double)s->steps_per_epoch;
	int64_t warmup = s->warmup;
	switch (s->kind) {
	case ML_LR_STEP:
		if (s->steps_per_epoch > 0 && s->step_epochs > 0)
			lr *= pow(s->gamma, floor((double)(step / (uint64_t)s->steps_per_epoch) /
						  (double)s->step_epochs));
		break;
	case ML_LR_COSINE:
		if (total > 0)
			lr = s->lr_min +
			     (s->lr - s->lr_min) * 0.5 * (1 + cos(M_PI * (double)step / total));
		break;
	case ML_LR_WARMUP:
		if (warmup == 0)
			warmup = ML_LR_WARMUP_DEFAULT;
		break;
	default:
		break;
	}
	if (warmup > 0 && step < (uint64_t)warmup)
		lr *= (double)(step + 1) / (double)warmup;
	return lr;
}

/*
 * rng.c: the one random number generator of the library and the tools
 * (ml_util.h): splitmix64 for seeding and counter-based streams,
 * xoshiro256** for long streams. Every function is pure over its state, so
 * streams in different threads need no lock.
 */
#include "ml.h"

uint64_t
ml_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t
ml_splitmix64(uint64_t *state)
{
	uint64_t z = *state;
	*state = z + 0x9e3779b97f4a7c15ull;
	return ml_mix64(z);
}

void
ml_rng_seed(struct ml_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = ml_splitmix64(&seed);
}

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t
ml_rng_next(struct ml_rng *r)
{
	uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

uint64_t
ml_rng_below(struct ml_rng *r, uint64_t n)
{
	unsigned __int128 m = (unsigned __int128)ml_rng_next(r) * n;
	uint64_t l = (uint64_t)m;
	if (l < n) {
		uint64_t t = -n % n;
		while (l < t) {
			m = (unsigned __int128)ml_rng_next(r) * n;
			l = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

double
ml_rng_unit(struct ml_rng *r)
{
	return (double)(ml_rng_next(r) >> 11) * 0x1.0p-53;
}

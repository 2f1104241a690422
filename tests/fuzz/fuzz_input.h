/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A fuzz input read as a script: bytes, then zeros once it is used up. */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H
#include <stddef.h>
#include <stdint.h>

struct in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t u8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

/* little-endian, read in order */
static inline uint32_t u16(struct in *in)
{
	uint32_t lo = u8(in);

	return lo | (uint32_t)u8(in) << 8;
}

static inline uint32_t u32(struct in *in)
{
	uint32_t lo = u16(in);

	return lo | u16(in) << 16;
}
#endif

/*
 * amx.h: Intel AMX (Advanced Matrix Extensions) for the bf16 and int8
 * GEMMs: eight tile registers of up to 16 rows of 64 bytes, and
 * tdpbf16ps / tdpbusd, which multiply a 16 x 64-byte A tile by a B tile of
 * 16 rows of 16 pairs (bf16) or quads (int8) of consecutive k into 16 x 16
 * f32 or int32 sums. That B layout is the packing both GEMMs already use
 * (bf16.c's pair rows, quant_q8.h's groups of four), so AMX reads the packed
 * panels as they are.
 *
 * ml_amx_ok: the CPU has AMX-TILE, AMX-BF16 and AMX-INT8 and the kernel
 * granted this process the tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, Linux 5.16 and later); asked once. ML_AMX=0 in the
 * environment says no (the tests force the fallbacks with it).
 *
 * A thread that uses the tiles loads a configuration first
 * (struct ml_amx_cfg, filled by ml_amx_tile: the rows and bytes per row of
 * each tile; tiles left at 0 are unused) and releases them when done (_tile_release), so that a
 * context switch does not save 8 KB it no longer needs.
 */
#ifndef ML_CPU_AMX_H
#define ML_CPU_AMX_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

bool ml_amx_ok(void);

/* the 64-byte operand of ldtilecfg (palette 1) */
struct ml_amx_cfg {
	uint8_t palette, start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* ml_amx_tile: tile t of cfg holds rows x colsb bytes. */
static inline void
ml_amx_tile(struct ml_amx_cfg *cfg, int t, int rows, int colsb)
{
	cfg->palette = 1;
	cfg->rows[t] = (uint8_t)rows;
	cfg->colsb[t] = (uint16_t)colsb;
}

#endif

/*
 * ml_quant.h: quantisation (lib/quant): calibration, int8 QDQ and integer
 * forms, fp16/bf16 conversion. Included by ml.h. Owner: mlquant (issue 8).
 */
#ifndef ML_QUANT_H
#define ML_QUANT_H

#endif

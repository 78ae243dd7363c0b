/*
 * train/kernels/xent.h - softmax cross-entropy, fused with its gradient.
 *   logits (N, K), labels (N) in [0, K) -> returns the mean loss over N
 *   (computed in double, log-sum-exp with the row max subtracted) and, when
 *   dlogits is not NULL, dlogits = (softmax(logits) - onehot(labels)) / N.
 *   correct (optional): number of rows whose argmax equals the label.
 */
#ifndef GM_TRAIN_KERNELS_XENT_H
#define GM_TRAIN_KERNELS_XENT_H

#include <stdint.h>

double gm_xent_cpu(int n, int k, const float *logits, const int32_t *labels, float *dlogits,
                   long *correct);

#endif

/* train/kernels/batchnorm_cpu.c - see batchnorm.h. */
#include "train/kernels/batchnorm.h"

#include <math.h>

#define BLK 64 /* channels per block of double accumulators (on the stack) */

void gm_batchnorm_forward_cpu(size_t rows, int c, int train, float momentum, float eps,
                              const float *x, const float *gamma, const float *beta,
                              float *running_mean, float *running_var, float *save_mean,
                              float *save_invstd, float *y)
{
    for (int c0 = 0; c0 < c; c0 += BLK) {
        const int nb = c - c0 < BLK ? c - c0 : BLK;
        float scale[BLK], shift[BLK];
        if (train) {
            double sum[BLK] = {0}, sq[BLK] = {0}, mean[BLK];
            for (size_t r = 0; r < rows; r++) {
                const float *xr = x + r * (size_t)c + c0;
                for (int j = 0; j < nb; j++)
                    sum[j] += xr[j];
            }
            for (int j = 0; j < nb; j++)
                mean[j] = sum[j] / (double)rows;
            for (size_t r = 0; r < rows; r++) {
                const float *xr = x + r * (size_t)c + c0;
                for (int j = 0; j < nb; j++) {
                    const double d = xr[j] - mean[j];
                    sq[j] += d * d;
                }
            }
            for (int j = 0; j < nb; j++) {
                const int ch = c0 + j;
                const double var = sq[j] / (double)rows;
                const double invstd = 1.0 / sqrt(var + (double)eps);
                save_mean[ch] = (float)mean[j];
                save_invstd[ch] = (float)invstd;
                running_mean[ch] =
                    (float)((1.0 - momentum) * running_mean[ch] + momentum * mean[j]);
                if (rows > 1)
                    running_var[ch] = (float)((1.0 - momentum) * running_var[ch] +
                                              momentum * var * (double)rows / (double)(rows - 1));
                scale[j] = (float)(invstd * gamma[ch]);
                shift[j] = (float)(beta[ch] - mean[j] * invstd * gamma[ch]);
            }
        } else {
            for (int j = 0; j < nb; j++) {
                const int ch = c0 + j;
                const double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
                scale[j] = (float)(invstd * gamma[ch]);
                shift[j] = (float)(beta[ch] - running_mean[ch] * invstd * gamma[ch]);
            }
        }
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * (size_t)c + c0;
            float *yr = y + r * (size_t)c + c0;
            for (int j = 0; j < nb; j++)
                yr[j] = xr[j] * scale[j] + shift[j];
        }
    }
}

void gm_batchnorm_backward_cpu(size_t rows, int c, const float *x, const float *gamma,
                               const float *save_mean, const float *save_invstd, const float *dy,
                               float *dgamma, float *dbeta, float *dx)
{
    for (int c0 = 0; c0 < c; c0 += BLK) {
        const int nb = c - c0 < BLK ? c - c0 : BLK;
        double sdy[BLK] = {0}, sdyx[BLK] = {0};
        float mean[BLK], inv[BLK], a[BLK], b[BLK], k[BLK];
        for (int j = 0; j < nb; j++) {
            mean[j] = save_mean[c0 + j];
            inv[j] = save_invstd[c0 + j];
        }
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * (size_t)c + c0;
            const float *dr = dy + r * (size_t)c + c0;
            for (int j = 0; j < nb; j++) {
                sdy[j] += dr[j];
                sdyx[j] += (double)dr[j] * (double)((xr[j] - mean[j]) * inv[j]);
            }
        }
        for (int j = 0; j < nb; j++) {
            const int ch = c0 + j;
            dbeta[ch] = (float)sdy[j];
            dgamma[ch] = (float)sdyx[j];
            /* dx = k * (dy - a - xhat * b), k = gamma*invstd */
            k[j] = gamma[ch] * inv[j];
            a[j] = (float)(sdy[j] / (double)rows);
            b[j] = (float)(sdyx[j] / (double)rows);
        }
        if (dx == NULL)
            continue;
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * (size_t)c + c0;
            const float *dr = dy + r * (size_t)c + c0;
            float *o = dx + r * (size_t)c + c0;
            for (int j = 0; j < nb; j++) {
                const float xhat = (xr[j] - mean[j]) * inv[j];
                o[j] = k[j] * (dr[j] - a[j] - xhat * b[j]);
            }
        }
    }
}

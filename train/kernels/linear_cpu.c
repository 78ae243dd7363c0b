/* train/kernels/linear_cpu.c - see linear.h (OpenBLAS sgemm). */
#include "train/kernels/linear.h"

#include <cblas.h>
#include <string.h>

void gm_linear_forward_cpu(int n, int in, int out, const float *x, const float *w, const float *b,
                           float *y)
{
    for (int r = 0; r < n; r++) { /* bias broadcast, then y += x w^T */
        float *restrict yr = y + (size_t)r * out;
        for (int o = 0; o < out; o++)
            yr[o] = b[o];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y,
                out);
}

void gm_linear_backward_cpu(int n, int in, int out, const float *x, const float *w, const float *dy,
                            float *dw, float *db, float *dx)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw,
                in);
    memset(db, 0, sizeof(float) * (size_t)out);
    for (int r = 0; r < n; r++) {
        const float *restrict d = dy + (size_t)r * out;
        for (int o = 0; o < out; o++)
            db[o] += d[o];
    }
    if (dx != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
}

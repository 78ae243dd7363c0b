/* train/kernels/xent_cpu.c - see xent.h. */
#include "train/kernels/xent.h"

#include <math.h>
#include <stddef.h>

double gm_xent_cpu(int n, int k, const float *logits, const int32_t *labels, float *dlogits,
                   long *correct)
{
    double total = 0.0;
    long right = 0;
    const float inv_n = 1.0f / (float)n;

    for (int r = 0; r < n; r++) {
        const float *z = logits + (size_t)r * k;
        float mx = z[0];
        int arg = 0;
        double sum = 0.0;
        for (int j = 1; j < k; j++) {
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        }
        for (int j = 0; j < k; j++)
            sum += exp((double)(z[j] - mx));
        total += log(sum) - (double)(z[labels[r]] - mx);
        right += arg == labels[r];
        if (dlogits != NULL) {
            float *d = dlogits + (size_t)r * k;
            const double inv_sum = 1.0 / sum;
            for (int j = 0; j < k; j++)
                d[j] = (float)(exp((double)(z[j] - mx)) * inv_sum) * inv_n;
            d[labels[r]] -= inv_n;
        }
    }
    if (correct != NULL)
        *correct = right;
    return total / n;
}

/*
 * train/kernels/maxpool.h - max pooling, window = stride = k (no padding;
 * trailing rows/columns that do not fill a window are dropped, as PyTorch's
 * MaxPool2d(k) does), on NHWC activations, optionally fused with a ReLU
 * before it (relu(pool(x)) == pool(relu(x)), gradients included).
 *   x (N, H, W, C) -> y (N, H/k, W/k, C); arg (N, H/k, W/k, C) holds, for
 *   each output, the window position (0 .. k*k-1, row-major) of the maximum
 *   (the first one on ties, like PyTorch), or GM_MAXPOOL_NONE when the fused
 *   ReLU zeroed the output (no gradient flows).
 * Both directions are branch-free (compare + select): on real data the
 * comparisons are unpredictable, and a branchy loop spent most of its time
 * in mispredictions.  Backward writes every dx element (no separate zeroing).
 */
/*
 * General windows (gm_maxpool2d_*): kernel k, stride, zero padding pad, as
 * torch.nn.MaxPool2d(k, stride, pad) (ceil_mode False): the output is
 * (h + 2*pad - k) / stride + 1 per axis, padded positions never win (they
 * are -inf), arg is the window position (ky * k + kx, counted from the
 * padded window's corner) of the first maximum, or GM_MAXPOOL_NONE as above.
 * Windows may overlap (stride < k): backward sums the gradients an input
 * receives, in output order.  stride == k with no padding is the k x k path
 * above, bit for bit.
 */
#ifndef GM_TRAIN_KERNELS_MAXPOOL_H
#define GM_TRAIN_KERNELS_MAXPOOL_H

#include <stdint.h>

#define GM_MAXPOOL_NONE 255

struct gm_pool2d_shape {
    int n, h, w, c;     /* input */
    int k, stride, pad; /* window, stride, zero padding on each side */
    int oh, ow;         /* output: (h + 2*pad - k) / stride + 1, same for w */
};

/* Fills oh/ow; 0, or -EINVAL when a size is not positive, k > 15 (the
 * window position must fit arg's byte), pad > k / 2 (PyTorch's rule: every
 * window then holds an input) or the window does not fit. */
int gm_pool2d_shape_init(struct gm_pool2d_shape *s, int n, int h, int w, int c, int k, int stride,
                         int pad);

void gm_maxpool_forward_cpu(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                            uint8_t *arg);
void gm_maxpool_backward_cpu(int n, int h, int w, int c, int k, const float *dy, const uint8_t *arg,
                             float *dx);
void gm_maxpool2d_forward_cpu(const struct gm_pool2d_shape *s, int relu, const float *x, float *y,
                              uint8_t *arg);
void gm_maxpool2d_backward_cpu(const struct gm_pool2d_shape *s, const float *dy, const uint8_t *arg,
                               float *dx);

#endif

/*
 * train/kernels/winograd_cpu.c - Winograd F(mxm, 3x3) convolution, CPU, m = 2
 * or 4 (transforms here, the products in OpenBLAS's sgemm); see winograd.h
 * for the algebra, which m each pass uses and why, and the workspace.
 *
 * Channels are NHWC's inner, contiguous axis, so every transform works on
 * 16 channels at once (one AVX-512 vector with -march=native; GCC splits it
 * elsewhere) and the transformed tensors are laid out so that each of the
 * P = (m+2)^2 products is one plain row-major sgemm:
 *   V (P, T, C), M (P, T, OC) for a chunk of T tiles; U, dU (P, OC, C).
 * Tile t of the batch is (n, ty, tx) = row-major over (N, ceil(OH/m),
 * ceil(OW/m)); its input patch starts at (m ty - 1, m tx - 1) (padding 1).
 * The tile code takes m as a constant (always inlined into one loop per m).
 */
#include "train/kernels/winograd.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

#define VEC 16 /* channels per vector */
#define AMAX 6 /* largest transformed tile side, m + 2 */
#define INLINE static inline __attribute__((always_inline))

typedef float v16f __attribute__((vector_size(64)));

INLINE v16f ld(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

INLINE void st(float *p, v16f v)
{
    memcpy(p, &v, sizeof(v));
}

int gm_winograd_use(const struct gm_conv2d_shape *s)
{
    return s->tiled && s->k == 3 && s->stride == 1 && s->pad == 1 && s->groups == 1 &&
           s->c % VEC == 0 && s->oc % VEC == 0 && s->oh >= 4 && s->ow >= 4;
}

static size_t round16(size_t floats)
{
    return (floats + 15) & ~(size_t)15; /* keep what follows 64-byte aligned */
}

struct geometry {
    int m, a;     /* output tile side, transformed tile side (m + 2) */
    size_t npos;  /* a * a */
    int th, tw;   /* tiles per column and row of one image */
    size_t tiles; /* of the batch */
    size_t cap;   /* most tiles a chunk holds (what the workspace is sized for) */
    size_t chunk; /* tiles per chunk: cap or less, the chunks balanced */
};

static void geometry_of(const struct gm_conv2d_shape *s, int m, struct geometry *g)
{
    size_t cap, nchunks;

    g->m = m;
    g->a = m + 2;
    g->npos = (size_t)g->a * (size_t)g->a;
    cap = GM_WINOGRAD_CHUNK_FLOATS / (g->npos * (size_t)(s->c + s->oc));
    g->th = (s->oh + m - 1) / m;
    g->tw = (s->ow + m - 1) / m;
    g->tiles = (size_t)s->n * (size_t)g->th * (size_t)g->tw;
    if (cap < 16)
        cap = 16;
    if (cap > g->tiles)
        cap = g->tiles; /* grows with the batch: a workspace for N serves fewer */
    g->cap = cap;
    nchunks = (g->tiles + cap - 1) / cap;
    g->chunk = (g->tiles + nchunks - 1) / nchunks;
}

/* floats of U, dU (npos * OC * C each) and of one chunk's V and M */
static size_t ws_of(const struct gm_conv2d_shape *s, int m, size_t *upos, size_t *vpos)
{
    struct geometry g;

    geometry_of(s, m, &g);
    *upos = round16(g.npos * (size_t)s->oc * (size_t)s->c);
    *vpos = round16(g.npos * g.cap * (size_t)s->c);
    return 2 * *upos + *vpos + round16(g.npos * g.cap * (size_t)s->oc);
}

size_t gm_winograd_ws_floats(const struct gm_conv2d_shape *s)
{
    size_t u, v, f = ws_of(s, GM_WINOGRAD_FWD_M, &u, &v), b = ws_of(s, GM_WINOGRAD_BWD_M, &u, &v);

    return f > b ? f : b;
}

/* ---- the 1-D transforms, on 16 channels ----------------------------------------
 * F(4x4, 3x3) (points 0, +-1, +-2, oo) and F(2x2, 3x3) (0, +-1, oo), as in
 * Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2016);
 * each _adj is the transpose of its _fwd. */

/* o = G g: 3 taps -> m + 2 */
INLINE void g_fwd(int m, v16f a, v16f b, v16f c, v16f *o)
{
    if (m == 4) {
        o[0] = a * 0.25f;
        o[1] = (a + b + c) * (-1.0f / 6.0f);
        o[2] = (a - b + c) * (-1.0f / 6.0f);
        o[3] = a * (1.0f / 24.0f) + b * (1.0f / 12.0f) + c * (1.0f / 6.0f);
        o[4] = a * (1.0f / 24.0f) - b * (1.0f / 12.0f) + c * (1.0f / 6.0f);
        o[5] = c;
    } else {
        o[0] = a;
        o[1] = (a + b + c) * 0.5f;
        o[2] = (a - b + c) * 0.5f;
        o[3] = c;
    }
}

/* o = G^T u: m + 2 -> 3 taps */
INLINE void g_adj(int m, const v16f *u, v16f *o)
{
    if (m == 4) {
        o[0] = u[0] * 0.25f - (u[1] + u[2]) * (1.0f / 6.0f) + (u[3] + u[4]) * (1.0f / 24.0f);
        o[1] = (u[2] - u[1]) * (1.0f / 6.0f) + (u[3] - u[4]) * (1.0f / 12.0f);
        o[2] = (u[3] + u[4] - u[1] - u[2]) * (1.0f / 6.0f) + u[5];
    } else {
        o[0] = u[0] + (u[1] + u[2]) * 0.5f;
        o[1] = (u[1] - u[2]) * 0.5f;
        o[2] = (u[1] + u[2]) * 0.5f + u[3];
    }
}

/* o = B^T d: m + 2 -> m + 2 */
INLINE void b_fwd(int m, const v16f *d, v16f *o)
{
    if (m == 4) {
        o[0] = d[0] * 4.0f - d[2] * 5.0f + d[4];
        o[1] = (d[1] + d[2]) * -4.0f + d[3] + d[4];
        o[2] = (d[1] - d[2]) * 4.0f - d[3] + d[4];
        o[3] = (d[3] - d[1]) * 2.0f - d[2] + d[4];
        o[4] = (d[1] - d[3]) * 2.0f - d[2] + d[4];
        o[5] = d[1] * 4.0f - d[3] * 5.0f + d[5];
    } else {
        o[0] = d[0] - d[2];
        o[1] = d[1] + d[2];
        o[2] = d[2] - d[1];
        o[3] = d[1] - d[3];
    }
}

/* o = B v: m + 2 -> m + 2 */
INLINE void b_adj(int m, const v16f *v, v16f *o)
{
    if (m == 4) {
        o[0] = v[0] * 4.0f;
        o[1] = (v[2] - v[1] + v[5]) * 4.0f + (v[4] - v[3]) * 2.0f;
        o[2] = v[0] * -5.0f - (v[1] + v[2]) * 4.0f - (v[3] + v[4]);
        o[3] = v[1] - v[2] + (v[3] - v[4]) * 2.0f - v[5] * 5.0f;
        o[4] = v[0] + v[1] + v[2] + v[3] + v[4];
        o[5] = v[5];
    } else {
        o[0] = v[0];
        o[1] = v[1] - v[2] + v[3];
        o[2] = v[1] + v[2] - v[0];
        o[3] = -v[3];
    }
}

/* o = A^T x: m + 2 -> m */
INLINE void a_fwd(int m, const v16f *x, v16f *o)
{
    if (m == 4) {
        const v16f p12 = x[1] + x[2], m12 = x[1] - x[2], p34 = x[3] + x[4], m34 = x[3] - x[4];
        o[0] = x[0] + p12 + p34;
        o[1] = m12 + m34 * 2.0f;
        o[2] = p12 + p34 * 4.0f;
        o[3] = m12 + m34 * 8.0f + x[5];
    } else {
        o[0] = x[0] + x[1] + x[2];
        o[1] = x[1] - x[2] - x[3];
    }
}

/* o = A y: m -> m + 2 */
INLINE void a_adj(int m, const v16f *y, v16f *o)
{
    if (m == 4) {
        const v16f p02 = y[0] + y[2], p13 = y[1] + y[3];
        const v16f q02 = y[0] + y[2] * 4.0f, q13 = (y[1] + y[3] * 4.0f) * 2.0f;
        o[0] = y[0];
        o[1] = p02 + p13;
        o[2] = p02 - p13;
        o[3] = q02 + q13;
        o[4] = q02 - q13;
        o[5] = y[3];
    } else {
        o[0] = y[0];
        o[1] = y[0] + y[1];
        o[2] = y[0] - y[1];
        o[3] = -y[1];
    }
}

/* ---- weights: U = G g G^T and dw = G^T dU G ------------------------------------ */

/* output channels [o0, o1) */
INLINE void weights_fwd(const struct gm_conv2d_shape *s, int m, const float *w, float *u, int o0,
                        int o1)
{
    const int c = s->c, oc = s->oc, a = m + 2;

    for (int o = o0; o < o1; o++) {
        const float *wo = w + (size_t)o * 9 * c;
        for (int c0 = 0; c0 < c; c0 += VEC) {
            v16f t[AMAX][3], col[AMAX], r[AMAX];
            for (int kx = 0; kx < 3; kx++) {
                g_fwd(m, ld(wo + (size_t)kx * c + c0), ld(wo + (size_t)(3 + kx) * c + c0),
                      ld(wo + (size_t)(6 + kx) * c + c0), col);
                for (int i = 0; i < a; i++)
                    t[i][kx] = col[i];
            }
            for (int i = 0; i < a; i++) {
                g_fwd(m, t[i][0], t[i][1], t[i][2], r);
                for (int j = 0; j < a; j++)
                    st(u + ((size_t)(i * a + j) * oc + o) * c + c0, r[j]);
            }
        }
    }
}

/* output channels [o0, o1) */
INLINE void weights_adj(const struct gm_conv2d_shape *s, int m, const float *du, float *dw, int o0,
                        int o1)
{
    const int c = s->c, oc = s->oc, a = m + 2;

    for (int o = o0; o < o1; o++) {
        float *wo = dw + (size_t)o * 9 * c;
        for (int c0 = 0; c0 < c; c0 += VEC) {
            v16f t[AMAX][3], row[AMAX], col[AMAX], k[3];
            for (int i = 0; i < a; i++) {
                for (int j = 0; j < a; j++)
                    row[j] = ld(du + ((size_t)(i * a + j) * oc + o) * c + c0);
                g_adj(m, row, t[i]);
            }
            for (int kx = 0; kx < 3; kx++) {
                for (int i = 0; i < a; i++)
                    col[i] = t[i][kx];
                g_adj(m, col, k);
                for (int ky = 0; ky < 3; ky++)
                    st(wo + (size_t)(ky * 3 + kx) * c + c0, k[ky]);
            }
        }
    }
}

/* ---- tiles ----------------------------------------------------------------------- */

struct tile {
    size_t n;
    int y0, x0; /* top-left input pixel of the patch (may be -1) */
};

static struct tile tile_of(const struct gm_conv2d_shape *s, const struct geometry *g, size_t t)
{
    const size_t per_image = (size_t)g->th * g->tw, r = t % per_image;
    struct tile tl = {.n = t / per_image,
                      .y0 = (int)(r / (size_t)g->tw) * g->m - s->pad,
                      .x0 = (int)(r % (size_t)g->tw) * g->m - s->pad};
    return tl;
}

/* V[xi][ti] (C floats each, rows of a chunk of `rows` tiles) = B^T d B, channels [c0, c1) */
INLINE void input_fwd(const struct gm_conv2d_shape *s, int m, const float *x, struct tile tl,
                      float *v, size_t rows, size_t ti, int cb, int ce)
{
    const int c = s->c, a = m + 2;
    const float *xn = x + tl.n * s->h * s->w * c;
    const float *src[AMAX][AMAX];
    const v16f zero = {0};

    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) {
            const int iy = tl.y0 + i, ix = tl.x0 + j;
            src[i][j] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                            ? xn + ((size_t)iy * s->w + (size_t)ix) * c
                            : NULL;
        }
    for (int c0 = cb; c0 < ce; c0 += VEC) {
        v16f t[AMAX][AMAX], d[AMAX], o[AMAX];
        for (int j = 0; j < a; j++) {
            for (int i = 0; i < a; i++)
                d[i] = src[i][j] != NULL ? ld(src[i][j] + c0) : zero;
            b_fwd(m, d, o);
            for (int i = 0; i < a; i++)
                t[i][j] = o[i];
        }
        for (int i = 0; i < a; i++) {
            b_fwd(m, t[i], o);
            for (int j = 0; j < a; j++)
                st(v + ((size_t)(i * a + j) * rows + ti) * c + c0, o[j]);
        }
    }
}

/* dx (patch of tile tl, inside the image) += B dV B^T, channels [cb, ce) */
INLINE void input_adj(const struct gm_conv2d_shape *s, int m, const float *dv, size_t rows,
                      size_t ti, struct tile tl, float *dx, int cb, int ce)
{
    const int c = s->c, a = m + 2;
    float *dxn = dx + tl.n * s->h * s->w * c;
    float *dst[AMAX][AMAX];

    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) {
            const int iy = tl.y0 + i, ix = tl.x0 + j;
            dst[i][j] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                            ? dxn + ((size_t)iy * s->w + (size_t)ix) * c
                            : NULL;
        }
    for (int c0 = cb; c0 < ce; c0 += VEC) {
        v16f t[AMAX][AMAX], row[AMAX], o[AMAX];
        for (int i = 0; i < a; i++) {
            for (int j = 0; j < a; j++)
                row[j] = ld(dv + ((size_t)(i * a + j) * rows + ti) * c + c0);
            b_adj(m, row, t[i]);
        }
        for (int j = 0; j < a; j++) {
            for (int i = 0; i < a; i++)
                row[i] = t[i][j];
            b_adj(m, row, o);
            for (int i = 0; i < a; i++)
                if (dst[i][j] != NULL)
                    st(dst[i][j] + c0, ld(dst[i][j] + c0) + o[i]);
        }
    }
}

/* y (m x m outputs of tile tl, inside the image) = A^T M A (+ b), channels [cb, ce) */
INLINE void output_fwd(const struct gm_conv2d_shape *s, int m, const float *mm, size_t rows,
                       size_t ti, struct tile tl, const float *b, float *y, int cb, int ce)
{
    const int oc = s->oc, a = m + 2, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < m ? s->oh - oy0 : m, nx = s->ow - ox0 < m ? s->ow - ox0 : m;
    float *yn = y + tl.n * s->oh * s->ow * oc;

    for (int c0 = cb; c0 < ce; c0 += VEC) {
        const v16f bias = b != NULL ? ld(b + c0) : (v16f){0};
        v16f t[4][AMAX], row[AMAX], o[4];
        for (int j = 0; j < a; j++) {
            for (int i = 0; i < a; i++)
                row[i] = ld(mm + ((size_t)(i * a + j) * rows + ti) * oc + c0);
            a_fwd(m, row, o);
            for (int i = 0; i < m; i++)
                t[i][j] = o[i];
        }
        for (int i = 0; i < ny; i++) {
            a_fwd(m, t[i], o);
            for (int j = 0; j < nx; j++)
                st(yn + ((size_t)(oy0 + i) * s->ow + (size_t)(ox0 + j)) * oc + c0, o[j] + bias);
        }
    }
}

/* dM[xi][ti] = A dY A^T (dY zero outside the image), channels [cb, ce) */
INLINE void output_adj(const struct gm_conv2d_shape *s, int m, const float *dy, struct tile tl,
                       float *dm, size_t rows, size_t ti, int cb, int ce)
{
    const int oc = s->oc, a = m + 2, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < m ? s->oh - oy0 : m, nx = s->ow - ox0 < m ? s->ow - ox0 : m;
    const float *dyn = dy + tl.n * s->oh * s->ow * oc;
    const v16f zero = {0};

    for (int c0 = cb; c0 < ce; c0 += VEC) {
        v16f t[4][AMAX], g[4], o[AMAX];
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < m; j++)
                g[j] = i < ny && j < nx
                           ? ld(dyn + ((size_t)(oy0 + i) * s->ow + (size_t)(ox0 + j)) * oc + c0)
                           : zero;
            a_adj(m, g, t[i]);
        }
        for (int j = 0; j < a; j++) {
            for (int i = 0; i < m; i++)
                g[i] = t[i][j];
            a_adj(m, g, o);
            for (int i = 0; i < a; i++)
                st(dm + ((size_t)(i * a + j) * rows + ti) * oc + c0, o[i]);
        }
    }
}

/* ---- the passes, on one or more threads ------------------------------------------
 * With OpenBLAS set to T > 1 threads, a pass runs on T threads of its own
 * (the caller and T - 1 started for the call), each calling sgemm on one
 * thread: the transforms split by channel blocks, the products by position
 * xi, and a barrier between the phases.  Every value is computed by the same
 * operations in the same order whatever T is (each sgemm whole on one
 * thread, each transform per channel), so the results do not depend on the
 * thread count.  OpenBLAS is set to 1 thread for the pass and back after. */

#define MAX_THREADS 64

struct pass {
    const struct gm_conv2d_shape *s;
    int m, fwd;
    const float *x, *w, *b, *dy;
    float *y, *dw, *db, *dx;
    float *u, *du, *v, *mm; /* carved from the workspace */
    struct geometry g;
    int nth;
    pthread_barrier_t bar;
    /* start gate: the threads wait until the caller knows how many started */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go; /* 1: run with nth threads */
};

struct worker {
    struct pass *p;
    int k;
};

static void sync_all(struct pass *p)
{
    if (p->nth > 1)
        pthread_barrier_wait(&p->bar);
}

/* share k of nth of [0, n) units */
static void share(int n, int k, int nth, int *lo, int *hi)
{
    *lo = (int)((long)n * k / nth);
    *hi = (int)((long)n * (k + 1) / nth);
}

INLINE void forward_m(struct pass *p, int m, int k)
{
    const struct gm_conv2d_shape *s = p->s;
    const struct geometry *g = &p->g;
    const int c = s->c, oc = s->oc;
    int c0, c1, o0, o1, x0, x1;

    share(c / VEC, k, p->nth, &c0, &c1);
    share(oc / VEC, k, p->nth, &o0, &o1);
    share((int)g->npos, k, p->nth, &x0, &x1);
    c0 *= VEC, c1 *= VEC, o0 *= VEC, o1 *= VEC;
    weights_fwd(s, m, p->w, p->u, o0, o1);
    for (size_t t0 = 0; t0 < g->tiles; t0 += g->chunk) {
        const size_t rows = g->tiles - t0 < g->chunk ? g->tiles - t0 : g->chunk;
        for (size_t ti = 0; ti < rows; ti++)
            input_fwd(s, m, p->x, tile_of(s, g, t0 + ti), p->v, rows, ti, c0, c1);
        sync_all(p); /* V of the chunk (and U) complete; M no longer read */
        /* M[xi] (T, OC) = V[xi] (T, C) x U[xi]^T */
        for (size_t xi = (size_t)x0; xi < (size_t)x1; xi++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, oc, c, 1.0f,
                        p->v + xi * rows * c, c, p->u + xi * oc * c, c, 0.0f,
                        p->mm + xi * rows * oc, oc);
        sync_all(p); /* M complete; V no longer read */
        for (size_t ti = 0; ti < rows; ti++)
            output_fwd(s, m, p->mm, rows, ti, tile_of(s, g, t0 + ti), p->b, p->y, o0, o1);
    }
}

INLINE void backward_m(struct pass *p, int m, int k)
{
    const struct gm_conv2d_shape *s = p->s;
    const struct geometry *g = &p->g;
    const int c = s->c, oc = s->oc;
    const size_t pixels = (size_t)s->n * s->oh * s->ow;
    int c0, c1, o0, o1, x0, x1, n0, n1;

    share(c / VEC, k, p->nth, &c0, &c1);
    share(oc / VEC, k, p->nth, &o0, &o1);
    share((int)g->npos, k, p->nth, &x0, &x1);
    share(s->n, k, p->nth, &n0, &n1);
    c0 *= VEC, c1 *= VEC, o0 *= VEC, o1 *= VEC;
    if (p->db != NULL)
        for (int o = o0; o < o1; o++) {
            float acc = 0.0f;
            for (size_t q = 0; q < pixels; q++)
                acc += p->dy[q * (size_t)oc + (size_t)o];
            p->db[o] = acc;
        }
    if (p->dx != NULL) {
        const size_t img = (size_t)s->h * s->w * c;
        weights_fwd(s, m, p->w, p->u, o0, o1);
        memset(p->dx + (size_t)n0 * img, 0, sizeof(float) * (size_t)(n1 - n0) * img);
    }
    for (size_t t0 = 0; t0 < g->tiles; t0 += g->chunk) {
        const size_t rows = g->tiles - t0 < g->chunk ? g->tiles - t0 : g->chunk;
        for (size_t ti = 0; ti < rows; ti++) {
            const struct tile tl = tile_of(s, g, t0 + ti);
            input_fwd(s, m, p->x, tl, p->v, rows, ti, c0, c1);
            output_adj(s, m, p->dy, tl, p->mm, rows, ti, o0, o1);
        }
        sync_all(p); /* V, dM of the chunk (and U, dx zeroed) complete */
        for (size_t xi = (size_t)x0; xi < (size_t)x1; xi++) {
            const float *dmx = p->mm + xi * rows * oc;
            float *vx = p->v + xi * rows * c;
            /* dU[xi] (OC, C) += dM[xi]^T (OC, T) x V[xi] (T, C) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, (int)rows, 1.0f, dmx, oc,
                        vx, c, t0 == 0 ? 0.0f : 1.0f, p->du + xi * oc * c, c);
            /* dV[xi] (T, C) = dM[xi] (T, OC) x U[xi] (OC, C), over V[xi] (used) */
            if (p->dx != NULL)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, c, oc, 1.0f, dmx,
                            oc, p->u + xi * oc * c, c, 0.0f, vx, c);
        }
        sync_all(p); /* dV, dU complete; dM no longer read */
        if (p->dx != NULL)
            for (size_t ti = 0; ti < rows; ti++)
                input_adj(s, m, p->v, rows, ti, tile_of(s, g, t0 + ti), p->dx, c0, c1);
    }
    weights_adj(s, m, p->du, p->dw, o0, o1);
}

static void run_share(struct pass *p, int k)
{
    if (p->fwd && p->m == 4)
        forward_m(p, 4, k);
    else if (p->fwd)
        forward_m(p, 2, k);
    else if (p->m == 4)
        backward_m(p, 4, k);
    else
        backward_m(p, 2, k);
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct pass *p = wk->p;

    pthread_mutex_lock(&p->lock);
    while (p->go == 0)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
    if (wk->k < p->nth) /* else: started past a failed start, nothing to do */
        run_share(p, wk->k);
    return NULL;
}

static void run_pass(struct pass *p, float *ws)
{
    const int blas_threads = openblas_get_num_threads();
    int want = blas_threads < MAX_THREADS ? blas_threads : MAX_THREADS, started = 0;
    pthread_t th[MAX_THREADS];
    struct worker wk[MAX_THREADS];
    size_t upos, vpos;

    ws_of(p->s, p->m, &upos, &vpos);
    geometry_of(p->s, p->m, &p->g);
    p->u = ws, p->du = ws + upos, p->v = ws + 2 * upos, p->mm = p->v + vpos;
    if (want < 2) {
        p->nth = 1;
        run_share(p, 0);
        return;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->go = 0;
    p->nth = want;
    for (int k = 1; k < want; k++) {
        wk[k] = (struct worker){.p = p, .k = k};
        if (pthread_create(&th[k], NULL, worker_main, &wk[k]) != 0)
            break; /* run with the threads that started */
        started++;
    }
    p->nth = started + 1;
    if (p->nth > 1)
        pthread_barrier_init(&p->bar, NULL, (unsigned)p->nth);
    openblas_set_num_threads(1);
    pthread_mutex_lock(&p->lock);
    p->go = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    run_share(p, 0);
    for (int k = 1; k <= started; k++)
        pthread_join(th[k], NULL);
    openblas_set_num_threads(blas_threads);
    if (p->nth > 1)
        pthread_barrier_destroy(&p->bar);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
}

void gm_winograd_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                             const float *b, float *ws, float *y)
{
    struct pass p = {.s = s, .m = GM_WINOGRAD_FWD_M, .fwd = 1, .x = x, .w = w, .b = b, .y = y};

    run_pass(&p, ws);
}

void gm_winograd_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                              const float *dy, float *dw, float *db, float *dx, float *ws)
{
    struct pass p = {
        .s = s, .m = GM_WINOGRAD_BWD_M, .x = x, .w = w, .dy = dy, .dw = dw, .db = db, .dx = dx};

    run_pass(&p, ws);
}

/*
 * train/kernels/winograd_cpu.c - Winograd F(4x4, 3x3) convolution, CPU
 * (transforms here, the 36 products per chunk in OpenBLAS's sgemm); see
 * winograd.h for the algebra and the workspace.
 *
 * Channels are NHWC's inner, contiguous axis, so every transform works on
 * 16 channels at once (one AVX-512 vector with -march=native; GCC splits it
 * elsewhere) and the transformed tensors are laid out so that each of the
 * 36 products is one plain row-major sgemm:
 *   V (36, T, C), M (36, T, OC) for a chunk of T tiles; U, dU (36, OC, C).
 * Tile t of the batch is (n, ty, tx) = row-major over (N, ceil(OH/4),
 * ceil(OW/4)); its input patch starts at (4 ty - 1, 4 tx - 1) (padding 1).
 */
#include "train/kernels/winograd.h"

#include <cblas.h>
#include <string.h>

#define NPOS 36 /* 6x6 positions of the transformed tile */
#define VEC 16  /* channels per vector */

typedef float v16f __attribute__((vector_size(64)));

static inline v16f ld(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void st(float *p, v16f v)
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
    int th, tw;   /* tiles per column and row of one image */
    size_t tiles; /* of the batch */
    size_t cap;   /* most tiles a chunk holds (what the workspace is sized for) */
    size_t chunk; /* tiles per chunk: cap or less, the chunks balanced */
};

static void geometry_of(const struct gm_conv2d_shape *s, struct geometry *g)
{
    size_t cap = GM_WINOGRAD_CHUNK_FLOATS / (NPOS * (size_t)(s->c + s->oc)), nchunks;

    g->th = (s->oh + 3) / 4;
    g->tw = (s->ow + 3) / 4;
    g->tiles = (size_t)s->n * (size_t)g->th * (size_t)g->tw;
    if (cap < 16)
        cap = 16;
    if (cap > g->tiles)
        cap = g->tiles; /* grows with the batch: a workspace for N serves fewer */
    g->cap = cap;
    nchunks = (g->tiles + cap - 1) / cap;
    g->chunk = (g->tiles + nchunks - 1) / nchunks;
}

size_t gm_winograd_ws_floats(const struct gm_conv2d_shape *s)
{
    struct geometry g;

    geometry_of(s, &g);
    return 2 * round16((size_t)NPOS * s->oc * s->c) + round16((size_t)NPOS * g.cap * s->c) +
           round16((size_t)NPOS * g.cap * s->oc);
}

/* ---- the 1-D transforms, on 16 channels -------------------------------------- */

/* o = G g: 3 taps -> 6 */
static inline void g_fwd(v16f a, v16f b, v16f c, v16f o[6])
{
    o[0] = a * 0.25f;
    o[1] = (a + b + c) * (-1.0f / 6.0f);
    o[2] = (a - b + c) * (-1.0f / 6.0f);
    o[3] = a * (1.0f / 24.0f) + b * (1.0f / 12.0f) + c * (1.0f / 6.0f);
    o[4] = a * (1.0f / 24.0f) - b * (1.0f / 12.0f) + c * (1.0f / 6.0f);
    o[5] = c;
}

/* o = G^T u: 6 -> 3 taps (the adjoint of g_fwd) */
static inline void g_adj(const v16f u[6], v16f o[3])
{
    o[0] = u[0] * 0.25f - (u[1] + u[2]) * (1.0f / 6.0f) + (u[3] + u[4]) * (1.0f / 24.0f);
    o[1] = (u[2] - u[1]) * (1.0f / 6.0f) + (u[3] - u[4]) * (1.0f / 12.0f);
    o[2] = (u[3] + u[4] - u[1] - u[2]) * (1.0f / 6.0f) + u[5];
}

/* o = B^T d: 6 -> 6 */
static inline void b_fwd(const v16f d[6], v16f o[6])
{
    o[0] = d[0] * 4.0f - d[2] * 5.0f + d[4];
    o[1] = (d[1] + d[2]) * -4.0f + d[3] + d[4];
    o[2] = (d[1] - d[2]) * 4.0f - d[3] + d[4];
    o[3] = (d[3] - d[1]) * 2.0f - d[2] + d[4];
    o[4] = (d[1] - d[3]) * 2.0f - d[2] + d[4];
    o[5] = d[1] * 4.0f - d[3] * 5.0f + d[5];
}

/* o = B v: 6 -> 6 (the adjoint of b_fwd) */
static inline void b_adj(const v16f v[6], v16f o[6])
{
    o[0] = v[0] * 4.0f;
    o[1] = (v[2] - v[1] + v[5]) * 4.0f + (v[4] - v[3]) * 2.0f;
    o[2] = v[0] * -5.0f - (v[1] + v[2]) * 4.0f - (v[3] + v[4]);
    o[3] = v[1] - v[2] + (v[3] - v[4]) * 2.0f - v[5] * 5.0f;
    o[4] = v[0] + v[1] + v[2] + v[3] + v[4];
    o[5] = v[5];
}

/* o = A^T m: 6 -> 4 */
static inline void a_fwd(const v16f m[6], v16f o[4])
{
    const v16f p12 = m[1] + m[2], m12 = m[1] - m[2], p34 = m[3] + m[4], m34 = m[3] - m[4];

    o[0] = m[0] + p12 + p34;
    o[1] = m12 + m34 * 2.0f;
    o[2] = p12 + p34 * 4.0f;
    o[3] = m12 + m34 * 8.0f + m[5];
}

/* o = A y: 4 -> 6 (the adjoint of a_fwd) */
static inline void a_adj(const v16f y[4], v16f o[6])
{
    const v16f p02 = y[0] + y[2], p13 = y[1] + y[3];
    const v16f q02 = y[0] + y[2] * 4.0f, q13 = (y[1] + y[3] * 4.0f) * 2.0f;

    o[0] = y[0];
    o[1] = p02 + p13;
    o[2] = p02 - p13;
    o[3] = q02 + q13;
    o[4] = q02 - q13;
    o[5] = y[3];
}

/* ---- weights: U = G g G^T and dw = G^T dU G ---------------------------------- */

static void weights_fwd(const struct gm_conv2d_shape *s, const float *w, float *u)
{
    const int c = s->c, oc = s->oc;

    for (int o = 0; o < oc; o++) {
        const float *wo = w + (size_t)o * 9 * c;
        for (int c0 = 0; c0 < c; c0 += VEC) {
            v16f t[6][3], r[6];
            for (int kx = 0; kx < 3; kx++) {
                v16f col[6];
                g_fwd(ld(wo + (size_t)kx * c + c0), ld(wo + (size_t)(3 + kx) * c + c0),
                      ld(wo + (size_t)(6 + kx) * c + c0), col);
                for (int i = 0; i < 6; i++)
                    t[i][kx] = col[i];
            }
            for (int i = 0; i < 6; i++) {
                g_fwd(t[i][0], t[i][1], t[i][2], r);
                for (int j = 0; j < 6; j++)
                    st(u + ((size_t)(i * 6 + j) * oc + o) * c + c0, r[j]);
            }
        }
    }
}

static void weights_adj(const struct gm_conv2d_shape *s, const float *du, float *dw)
{
    const int c = s->c, oc = s->oc;

    for (int o = 0; o < oc; o++) {
        float *wo = dw + (size_t)o * 9 * c;
        for (int c0 = 0; c0 < c; c0 += VEC) {
            v16f t[6][3], row[6], col[6], k[3];
            for (int i = 0; i < 6; i++) {
                for (int j = 0; j < 6; j++)
                    row[j] = ld(du + ((size_t)(i * 6 + j) * oc + o) * c + c0);
                g_adj(row, t[i]);
            }
            for (int kx = 0; kx < 3; kx++) {
                for (int i = 0; i < 6; i++)
                    col[i] = t[i][kx];
                g_adj(col, k);
                for (int ky = 0; ky < 3; ky++)
                    st(wo + (size_t)(ky * 3 + kx) * c + c0, k[ky]);
            }
        }
    }
}

/* ---- tiles ------------------------------------------------------------------- */

struct tile {
    size_t n;
    int y0, x0; /* top-left input pixel of the 6x6 patch (may be -1) */
};

static struct tile tile_of(const struct gm_conv2d_shape *s, const struct geometry *g, size_t t)
{
    const size_t per_image = (size_t)g->th * g->tw, r = t % per_image;
    struct tile tl = {.n = t / per_image,
                      .y0 = (int)(r / (size_t)g->tw) * 4 - s->pad,
                      .x0 = (int)(r % (size_t)g->tw) * 4 - s->pad};
    return tl;
}

/* V[xi][ti] (C floats each, rows of a chunk of `rows` tiles) = B^T d B */
static void input_fwd(const struct gm_conv2d_shape *s, const float *x, struct tile tl, float *v,
                      size_t rows, size_t ti)
{
    const int c = s->c;
    const float *xn = x + tl.n * s->h * s->w * c;
    const float *src[6][6];
    const v16f zero = {0};

    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            const int iy = tl.y0 + i, ix = tl.x0 + j;
            src[i][j] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                            ? xn + ((size_t)iy * s->w + (size_t)ix) * c
                            : NULL;
        }
    for (int c0 = 0; c0 < c; c0 += VEC) {
        v16f t[6][6], d[6], o[6];
        for (int j = 0; j < 6; j++) {
            for (int i = 0; i < 6; i++)
                d[i] = src[i][j] != NULL ? ld(src[i][j] + c0) : zero;
            b_fwd(d, o);
            for (int i = 0; i < 6; i++)
                t[i][j] = o[i];
        }
        for (int i = 0; i < 6; i++) {
            b_fwd(t[i], o);
            for (int j = 0; j < 6; j++)
                st(v + ((size_t)(i * 6 + j) * rows + ti) * c + c0, o[j]);
        }
    }
}

/* dx (patch of tile tl, inside the image) += B dV B^T */
static void input_adj(const struct gm_conv2d_shape *s, const float *dv, size_t rows, size_t ti,
                      struct tile tl, float *dx)
{
    const int c = s->c;
    float *dxn = dx + tl.n * s->h * s->w * c;
    float *dst[6][6];

    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            const int iy = tl.y0 + i, ix = tl.x0 + j;
            dst[i][j] = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w
                            ? dxn + ((size_t)iy * s->w + (size_t)ix) * c
                            : NULL;
        }
    for (int c0 = 0; c0 < c; c0 += VEC) {
        v16f t[6][6], row[6], o[6];
        for (int i = 0; i < 6; i++) {
            for (int j = 0; j < 6; j++)
                row[j] = ld(dv + ((size_t)(i * 6 + j) * rows + ti) * c + c0);
            b_adj(row, t[i]);
        }
        for (int j = 0; j < 6; j++) {
            for (int i = 0; i < 6; i++)
                row[i] = t[i][j];
            b_adj(row, o);
            for (int i = 0; i < 6; i++)
                if (dst[i][j] != NULL)
                    st(dst[i][j] + c0, ld(dst[i][j] + c0) + o[i]);
        }
    }
}

/* y (4x4 outputs of tile tl, inside the image) = A^T M A (+ b) */
static void output_fwd(const struct gm_conv2d_shape *s, const float *m, size_t rows, size_t ti,
                       struct tile tl, const float *b, float *y)
{
    const int oc = s->oc, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < 4 ? s->oh - oy0 : 4, nx = s->ow - ox0 < 4 ? s->ow - ox0 : 4;
    float *yn = y + tl.n * s->oh * s->ow * oc;

    for (int c0 = 0; c0 < oc; c0 += VEC) {
        const v16f bias = b != NULL ? ld(b + c0) : (v16f){0};
        v16f t[4][6], row[6], o[4];
        for (int j = 0; j < 6; j++) {
            for (int i = 0; i < 6; i++)
                row[i] = ld(m + ((size_t)(i * 6 + j) * rows + ti) * oc + c0);
            a_fwd(row, o);
            for (int i = 0; i < 4; i++)
                t[i][j] = o[i];
        }
        for (int i = 0; i < ny; i++) {
            a_fwd(t[i], o);
            for (int j = 0; j < nx; j++)
                st(yn + ((size_t)(oy0 + i) * s->ow + (size_t)(ox0 + j)) * oc + c0, o[j] + bias);
        }
    }
}

/* dM[xi][ti] = A dY A^T (dY zero outside the image) */
static void output_adj(const struct gm_conv2d_shape *s, const float *dy, struct tile tl, float *dm,
                       size_t rows, size_t ti)
{
    const int oc = s->oc, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < 4 ? s->oh - oy0 : 4, nx = s->ow - ox0 < 4 ? s->ow - ox0 : 4;
    const float *dyn = dy + tl.n * s->oh * s->ow * oc;
    const v16f zero = {0};

    for (int c0 = 0; c0 < oc; c0 += VEC) {
        v16f t[4][6], g[4], o[6];
        for (int i = 0; i < 4; i++) {
            for (int j = 0; j < 4; j++)
                g[j] = i < ny && j < nx
                           ? ld(dyn + ((size_t)(oy0 + i) * s->ow + (size_t)(ox0 + j)) * oc + c0)
                           : zero;
            a_adj(g, t[i]);
        }
        for (int j = 0; j < 6; j++) {
            for (int i = 0; i < 4; i++)
                g[i] = t[i][j];
            a_adj(g, o);
            for (int i = 0; i < 6; i++)
                st(dm + ((size_t)(i * 6 + j) * rows + ti) * oc + c0, o[i]);
        }
    }
}

/* ---- the passes ---------------------------------------------------------------- */

void gm_winograd_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                             const float *b, float *ws, float *y)
{
    const int c = s->c, oc = s->oc;
    struct geometry g;

    geometry_of(s, &g);
    float *u = ws, *v = u + 2 * round16((size_t)NPOS * oc * c);
    float *m = v + round16((size_t)NPOS * g.cap * c);

    weights_fwd(s, w, u);
    for (size_t t0 = 0; t0 < g.tiles; t0 += g.chunk) {
        const size_t rows = g.tiles - t0 < g.chunk ? g.tiles - t0 : g.chunk;
        for (size_t ti = 0; ti < rows; ti++)
            input_fwd(s, x, tile_of(s, &g, t0 + ti), v, rows, ti);
        for (int xi = 0; xi < NPOS; xi++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, oc, c, 1.0f,
                        v + (size_t)xi * rows * c, c, u + (size_t)xi * oc * c, c, 0.0f,
                        m + (size_t)xi * rows * oc, oc);
        for (size_t ti = 0; ti < rows; ti++)
            output_fwd(s, m, rows, ti, tile_of(s, &g, t0 + ti), b, y);
    }
}

void gm_winograd_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                              const float *dy, float *dw, float *db, float *dx, float *ws)
{
    const int c = s->c, oc = s->oc;
    const size_t upos = round16((size_t)NPOS * oc * c);
    struct geometry g;

    geometry_of(s, &g);
    float *u = ws, *du = u + upos, *v = du + upos;
    float *m = v + round16((size_t)NPOS * g.cap * c);

    if (db != NULL) {
        const size_t pixels = (size_t)s->n * s->oh * s->ow;
        memset(db, 0, sizeof(float) * (size_t)oc);
        for (size_t p = 0; p < pixels; p++)
            for (int o = 0; o < oc; o++)
                db[o] += dy[p * oc + (size_t)o];
    }
    if (dx != NULL) {
        weights_fwd(s, w, u);
        memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
    }
    for (size_t t0 = 0; t0 < g.tiles; t0 += g.chunk) {
        const size_t rows = g.tiles - t0 < g.chunk ? g.tiles - t0 : g.chunk;
        for (size_t ti = 0; ti < rows; ti++) {
            const struct tile tl = tile_of(s, &g, t0 + ti);
            input_fwd(s, x, tl, v, rows, ti);
            output_adj(s, dy, tl, m, rows, ti);
        }
        for (int xi = 0; xi < NPOS; xi++) {
            const float *dm = m + (size_t)xi * rows * oc;
            float *vx = v + (size_t)xi * rows * c;
            /* dU[xi] (OC, C) += dM[xi]^T (OC, T) x V[xi] (T, C) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, (int)rows, 1.0f, dm, oc,
                        vx, c, t0 == 0 ? 0.0f : 1.0f, du + (size_t)xi * oc * c, c);
            /* dV[xi] (T, C) = dM[xi] (T, OC) x U[xi] (OC, C), over V[xi] (used) */
            if (dx != NULL)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, c, oc, 1.0f, dm,
                            oc, u + (size_t)xi * oc * c, c, 0.0f, vx, c);
        }
        if (dx != NULL)
            for (size_t ti = 0; ti < rows; ti++)
                input_adj(s, v, rows, ti, tile_of(s, &g, t0 + ti), dx);
    }
    weights_adj(s, du, dw);
}

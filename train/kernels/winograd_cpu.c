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
#include <string.h>

#define VEC 16 /* channels per vector */
#define AMAX 6 /* largest transformed tile side, m + 2 */
#define INLINE static inline __attribute__((always_inline))

typedef float v16f __attribute__((vector_size(64)));
/* Without AVX-512 (any -march but native on such a processor) GCC warns that
 * passing v16f changes the ABI; every function taking one is static and
 * always inlined, so no call crosses an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"

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

INLINE void weights_fwd(const struct gm_conv2d_shape *s, int m, const float *w, float *u)
{
    const int c = s->c, oc = s->oc, a = m + 2;

    for (int o = 0; o < oc; o++) {
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

INLINE void weights_adj(const struct gm_conv2d_shape *s, int m, const float *du, float *dw)
{
    const int c = s->c, oc = s->oc, a = m + 2;

    for (int o = 0; o < oc; o++) {
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

/* V[xi][ti] (C floats each, rows of a chunk of `rows` tiles) = B^T d B */
INLINE void input_fwd(const struct gm_conv2d_shape *s, int m, const float *x, struct tile tl,
                      float *v, size_t rows, size_t ti)
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
    for (int c0 = 0; c0 < c; c0 += VEC) {
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

/* dx (patch of tile tl, inside the image) += B dV B^T */
INLINE void input_adj(const struct gm_conv2d_shape *s, int m, const float *dv, size_t rows,
                      size_t ti, struct tile tl, float *dx)
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
    for (int c0 = 0; c0 < c; c0 += VEC) {
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

/* y (m x m outputs of tile tl, inside the image) = A^T M A (+ b) */
INLINE void output_fwd(const struct gm_conv2d_shape *s, int m, const float *mm, size_t rows,
                       size_t ti, struct tile tl, const float *b, float *y)
{
    const int oc = s->oc, a = m + 2, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < m ? s->oh - oy0 : m, nx = s->ow - ox0 < m ? s->ow - ox0 : m;
    float *yn = y + tl.n * s->oh * s->ow * oc;

    for (int c0 = 0; c0 < oc; c0 += VEC) {
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

/* dM[xi][ti] = A dY A^T (dY zero outside the image) */
INLINE void output_adj(const struct gm_conv2d_shape *s, int m, const float *dy, struct tile tl,
                       float *dm, size_t rows, size_t ti)
{
    const int oc = s->oc, a = m + 2, oy0 = tl.y0 + s->pad, ox0 = tl.x0 + s->pad;
    const int ny = s->oh - oy0 < m ? s->oh - oy0 : m, nx = s->ow - ox0 < m ? s->ow - ox0 : m;
    const float *dyn = dy + tl.n * s->oh * s->ow * oc;
    const v16f zero = {0};

    for (int c0 = 0; c0 < oc; c0 += VEC) {
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

/* ---- the passes ------------------------------------------------------------------ */

INLINE void forward_m(const struct gm_conv2d_shape *s, int m, const float *x, const float *w,
                      const float *b, float *ws, float *y)
{
    const int c = s->c, oc = s->oc;
    size_t upos, vpos;
    struct geometry g;

    ws_of(s, m, &upos, &vpos);
    geometry_of(s, m, &g);
    float *u = ws, *v = u + 2 * upos, *mm = v + vpos;

    weights_fwd(s, m, w, u);
    for (size_t t0 = 0; t0 < g.tiles; t0 += g.chunk) {
        const size_t rows = g.tiles - t0 < g.chunk ? g.tiles - t0 : g.chunk;
        for (size_t ti = 0; ti < rows; ti++)
            input_fwd(s, m, x, tile_of(s, &g, t0 + ti), v, rows, ti);
        /* M[xi] (T, OC) = V[xi] (T, C) x U[xi]^T */
        for (size_t xi = 0; xi < g.npos; xi++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, oc, c, 1.0f,
                        v + xi * rows * c, c, u + xi * oc * c, c, 0.0f, mm + xi * rows * oc, oc);
        for (size_t ti = 0; ti < rows; ti++)
            output_fwd(s, m, mm, rows, ti, tile_of(s, &g, t0 + ti), b, y);
    }
}

INLINE void backward_m(const struct gm_conv2d_shape *s, int m, const float *x, const float *w,
                       const float *dy, float *dw, float *dx, float *ws)
{
    const int c = s->c, oc = s->oc;
    size_t upos, vpos;
    struct geometry g;

    ws_of(s, m, &upos, &vpos);
    geometry_of(s, m, &g);
    float *u = ws, *du = u + upos, *v = du + upos, *dm = v + vpos;

    if (dx != NULL) {
        weights_fwd(s, m, w, u);
        memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
    }
    for (size_t t0 = 0; t0 < g.tiles; t0 += g.chunk) {
        const size_t rows = g.tiles - t0 < g.chunk ? g.tiles - t0 : g.chunk;
        for (size_t ti = 0; ti < rows; ti++) {
            const struct tile tl = tile_of(s, &g, t0 + ti);
            input_fwd(s, m, x, tl, v, rows, ti);
            output_adj(s, m, dy, tl, dm, rows, ti);
        }
        for (size_t xi = 0; xi < g.npos; xi++) {
            const float *dmx = dm + xi * rows * oc;
            float *vx = v + xi * rows * c;
            /* dU[xi] (OC, C) += dM[xi]^T (OC, T) x V[xi] (T, C) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, (int)rows, 1.0f, dmx, oc,
                        vx, c, t0 == 0 ? 0.0f : 1.0f, du + xi * oc * c, c);
            /* dV[xi] (T, C) = dM[xi] (T, OC) x U[xi] (OC, C), over V[xi] (used) */
            if (dx != NULL)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, c, oc, 1.0f, dmx,
                            oc, u + xi * oc * c, c, 0.0f, vx, c);
        }
        if (dx != NULL)
            for (size_t ti = 0; ti < rows; ti++)
                input_adj(s, m, v, rows, ti, tile_of(s, &g, t0 + ti), dx);
    }
    weights_adj(s, m, du, dw);
}

void gm_winograd_forward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                             const float *b, float *ws, float *y)
{
    if (GM_WINOGRAD_FWD_M == 4)
        forward_m(s, 4, x, w, b, ws, y);
    else
        forward_m(s, 2, x, w, b, ws, y);
}

void gm_winograd_backward_cpu(const struct gm_conv2d_shape *s, const float *x, const float *w,
                              const float *dy, float *dw, float *db, float *dx, float *ws)
{
    if (db != NULL) {
        const size_t pixels = (size_t)s->n * s->oh * s->ow;
        memset(db, 0, sizeof(float) * (size_t)s->oc);
        for (size_t p = 0; p < pixels; p++)
            for (int o = 0; o < s->oc; o++)
                db[o] += dy[p * (size_t)s->oc + (size_t)o];
    }
    if (GM_WINOGRAD_BWD_M == 4)
        backward_m(s, 4, x, w, dy, dw, dx, ws);
    else
        backward_m(s, 2, x, w, dy, dw, dx, ws);
}

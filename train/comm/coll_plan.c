/*
 * train/comm/coll_plan.c - alpha-beta cost model, algorithm choice and bucketing
 * for train/comm/collective.h.  Pure functions; thread-safe.
 *
 * Model (chosen; simple on purpose, as inputs are rough measurements):
 *  - a message of b bytes on link i->j costs alpha_ij + b / B_ij;
 *  - RING, chunk-pipelined: 2(N-1) stages, each bounded by the slowest ring
 *    link carrying one segment (S/N): 2(N-1) * max_i(alpha + S/N / B);
 *  - DIRECT: one round, a rank's sends share its uplink:
 *    max_i(max_j alpha_ij + sum_j S / B_ij);
 *  - HIER: group reduce (leader downlink shared, fp32) + leader all-reduce
 *    (DIRECT for <= 2 leaders, else RING; requested codec) + group broadcast.
 * S is the wire size (elements * codec bytes; fp32 inside groups).
 * Unknown links (links == NULL): 0.2 ms, 1 Gbit/s.
 */
#include <float.h>

#include "common/assert.h"
#include "train/comm/collective.h"

static struct gm_coll_link link_at(const struct gm_coll_link *links, int world, int i, int j)
{
    struct gm_coll_link def = {2e-4, 125e6};

    if (links == NULL)
        return def;
    return links[(size_t)i * (size_t)world + (size_t)j];
}

/* Ring over members[0..m) in that order. */
static double ring_cost(const struct gm_coll_link *links, int world, const int *members, int m,
                        double bytes)
{
    double worst = 0;

    if (m <= 1)
        return 0;
    for (int i = 0; i < m; i++) {
        struct gm_coll_link l = link_at(links, world, members[i], members[(i + 1) % m]);
        double t = l.alpha_s + bytes / m / l.bytes_per_s;
        if (t > worst)
            worst = t;
    }
    return 2.0 * (m - 1) * worst;
}

static double direct_cost(const struct gm_coll_link *links, int world, const int *members, int m,
                          double bytes)
{
    double worst = 0;

    for (int i = 0; i < m; i++) {
        double amax = 0, sum = 0;
        for (int j = 0; j < m; j++) {
            struct gm_coll_link l;
            if (i == j)
                continue;
            l = link_at(links, world, members[i], members[j]);
            if (l.alpha_s > amax)
                amax = l.alpha_s;
            sum += bytes / l.bytes_per_s;
        }
        if (m > 1 && amax + sum > worst)
            worst = amax + sum;
    }
    return worst;
}

int gm_coll_group_leader(const int *groups, int world, int r)
{
    int g;

    if (groups == NULL)
        return 0;
    g = groups[r];
    if (g >= 0 && g < world && groups[g] == g)
        return g; /* the label names a member: it leads (a star's hub) */
    for (int q = 0; q < world; q++)
        if (groups[q] == g)
            return q;
    return r;
}

static int ngroups(int world, const int *groups, int *leaders)
{
    int n = 0;

    for (int r = 0; r < world; r++)
        if (gm_coll_group_leader(groups, world, r) == r)
            leaders[n++] = r;
    return n;
}

static double hier_cost(const struct gm_coll_link *links, int world, const int *groups, size_t n,
                        enum gm_codec codec)
{
    int leaders[4096];
    int nl, members[4096];
    double intra_r = 0, intra_b = 0, inter;
    double b32 = (double)n * 4, bw = (double)gm_codec_bytes(codec, n);

    if (groups == NULL) { /* one group: reduce to rank 0 and broadcast */
        nl = 1;
        leaders[0] = 0;
    } else {
        nl = ngroups(world, groups, leaders);
    }
    for (int g = 0; g < nl; g++) {
        int l = leaders[g];
        double ar = 0, sr = 0, ab = 0, sb = 0;
        for (int r = 0; r < world; r++) {
            struct gm_coll_link up, down;
            if (r == l || (groups != NULL && groups[r] != groups[l]))
                continue;
            up = link_at(links, world, r, l);
            down = link_at(links, world, l, r);
            ar = up.alpha_s > ar ? up.alpha_s : ar;
            sr += b32 / up.bytes_per_s;
            ab = down.alpha_s > ab ? down.alpha_s : ab;
            sb += b32 / down.bytes_per_s;
        }
        if (ar + sr > intra_r)
            intra_r = ar + sr;
        if (ab + sb > intra_b)
            intra_b = ab + sb;
    }
    for (int i = 0; i < nl; i++)
        members[i] = leaders[i];
    inter = nl <= 2 || codec == GM_CODEC_Q8 ? direct_cost(links, world, members, nl, bw)
                                            : ring_cost(links, world, members, nl, bw);
    return intra_r + inter + intra_b;
}

double gm_coll_cost(enum gm_coll_algo algo, int world, const struct gm_coll_link *links,
                    const int *groups, size_t n, enum gm_codec codec)
{
    int all[4096];
    double bytes = (double)gm_codec_bytes(codec, n);

    GM_ASSERT(world >= 1 && world <= 4096);
    for (int i = 0; i < world; i++)
        all[i] = i;
    switch (algo) {
    case GM_COLL_RING:
        return ring_cost(links, world, all, world, bytes);
    case GM_COLL_DIRECT:
        return direct_cost(links, world, all, world, bytes);
    case GM_COLL_HIER:
        return hier_cost(links, world, groups, n, codec);
    default:
        return DBL_MAX;
    }
}

enum gm_coll_algo gm_coll_choose(int world, const struct gm_coll_link *links, const int *groups,
                                 size_t n, enum gm_codec codec)
{
    enum gm_coll_algo best = GM_COLL_RING;
    double best_t = gm_coll_cost(GM_COLL_RING, world, links, groups, n, codec);
    double t = gm_coll_cost(GM_COLL_DIRECT, world, links, groups, n, codec);

    if (t < best_t) {
        best = GM_COLL_DIRECT;
        best_t = t;
    }
    if (groups != NULL) {
        int leaders[4096];
        int nl = ngroups(world, groups, leaders);
        if (nl > 1 && nl < world) {
            t = gm_coll_cost(GM_COLL_HIER, world, links, groups, n, codec);
            if (t < best_t)
                best = GM_COLL_HIER;
        }
    }
    return best;
}

size_t gm_coll_bucket_bytes(const struct gm_coll_link *l)
{
    const double lo = 256.0 * 1024, hi = 64.0 * 1024 * 1024;
    double b;

    if (l == NULL)
        return (size_t)lo;
    b = 10.0 * l->alpha_s * l->bytes_per_s;
    if (!(b >= lo))
        b = lo;
    if (b > hi)
        b = hi;
    return (size_t)b;
}

size_t gm_coll_buckets(const size_t *layer_end, size_t nlayers, size_t bucket_bytes,
                       size_t *bucket_off, size_t *bucket_len)
{
    size_t nb = 0, end, i = nlayers;

    while (i > 0) {
        end = layer_end[i - 1];
        /* take layers i-1, i-2, ... until the bucket is big enough */
        while (i > 0) {
            size_t start = i >= 2 ? layer_end[i - 2] : 0;
            i--;
            if ((end - start) * sizeof(float) >= bucket_bytes)
                break;
        }
        bucket_off[nb] = i >= 1 ? layer_end[i - 1] : 0;
        bucket_len[nb] = end - bucket_off[nb];
        nb++;
    }
    return nb;
}

/*
 * tests/unit/test_optim.c - optimizers and schedules (train/nn/optim.h).
 *
 * 1. gm_optim_step against a double-precision reference written here from the
 *    published update rules (torch.optim.SGD / Adam docs), 200 steps of random
 *    gradients with per-element scales over 4 decades and a varying lr, n odd so the
 *    vector loops' tails run. Every parameter and state element must satisfy
 *        |got - ref| <= 1e-5 * max(|ref|, 0.1 * max_j |ref_j|)
 *    i.e. relative error 1e-5, floored at 10% of the buffer's largest magnitude:
 *    each float32 step rounds p at the scale |p| had then (~6e-8 |p|), so over 200
 *    steps an element that has moved towards zero carries an absolute error set by
 *    the buffer's scale, not by its current value (measured: up to 3.7e-7 on
 *    |p| ~ 1e-3 in a buffer of max 2). A wrong formula is off by O(1).
 * 2. The same against torch.optim.SGD / Adam run by /usr/bin/python3 on the same
 *    params, grads and lrs (temp binary files), same tolerance. Skipped with a note
 *    when python3 or torch is missing; a script that fails otherwise is a failure.
 * 3. Checkpoint semantics: state + step copied into a fresh optimizer continue
 *    bitwise identically; reset makes the next step behave like the first.
 * 4. Schedules against closed forms; contracts (bad configs, free after failed init,
 *    double free, state lengths).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/nn/optim.h"

GM_TEST_DEFINE_STATE;

#define N 1003    /* odd: exercises the scalar tails of the vector loops */
#define STEPS 200 /* reference comparison */
#define TSTEPS 50 /* torch comparison */
#define RTOL 1e-5 /* relative tolerance, see the header */
#define FLOOR 0.1 /* floor, as a fraction of the buffer's max magnitude */

/* splitmix64: small, seedable, good enough for test data. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_unit(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

struct problem {
    float p0[N];
    float g[STEPS][N];
    float lr[STEPS];
};

/* Params in [-1, 1); grads with a per-element scale in [1e-3, 10) and a bias (so
 * momentum builds up), fresh noise each step; lr varies by step. */
static void make_problem(struct problem *pr, uint64_t seed, float lr)
{
    float scale[N];

    for (int i = 0; i < N; i++) {
        pr->p0[i] = rng_unit(&seed);
        scale[i] = (float)pow(10.0, 1.0 + 2.0 * (double)rng_unit(&seed));
    }
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++)
            pr->g[s][i] = scale[i] * (0.3f + rng_unit(&seed));
        pr->lr[s] = lr * (1.0f + 0.5f * sinf((float)s * 0.1f));
    }
}

/* Double-precision reference, straight from the formulas in the torch docs. */
struct ref {
    struct gm_optim_config c;
    long t;
    double p[N], buf[N], m[N], v[N];
};

static void ref_init(struct ref *r, const struct gm_optim_config *c, const float *p0)
{
    memset(r, 0, sizeof(*r));
    r->c = *c;
    for (int i = 0; i < N; i++)
        r->p[i] = p0[i];
}

static void ref_step(struct ref *r, const float *g, float lr_f)
{
    const double lr = lr_f, wd = r->c.weight_decay;

    r->t++;
    for (int i = 0; i < N; i++) {
        double d = (double)g[i] + wd * r->p[i];
        if (r->c.kind == GM_OPTIM_SGD) {
            double mu = r->c.momentum;
            if (mu != 0.0) {
                r->buf[i] = r->t == 1 ? d : mu * r->buf[i] + d;
                d = r->c.nesterov ? d + mu * r->buf[i] : r->buf[i];
            }
            r->p[i] -= lr * d;
        } else {
            double b1 = r->c.beta1, b2 = r->c.beta2;
            r->m[i] = b1 * r->m[i] + (1.0 - b1) * d;
            r->v[i] = b2 * r->v[i] + (1.0 - b2) * d * d;
            double mhat = r->m[i] / (1.0 - pow(b1, (double)r->t));
            double vhat = r->v[i] / (1.0 - pow(b2, (double)r->t));
            r->p[i] -= lr * mhat / (sqrt(vhat) + r->c.eps);
        }
    }
}

/* Counts elements outside the tolerance; reports the worst one. */
static long compare(const char *what, const float *got, const double *want, size_t n,
                    double *worst_rel)
{
    double maxabs = 0.0, worst = 0.0;
    long bad = 0;
    size_t worst_i = 0;

    for (size_t i = 0; i < n; i++)
        maxabs = fmax(maxabs, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double denom = fmax(fabs(want[i]), FLOOR * maxabs);
        double rel =
            denom > 0.0 ? fabs((double)got[i] - want[i]) / denom : fabs((double)got[i] - want[i]);
        if (!(rel <= RTOL))
            bad++;
        if (!(rel <= worst)) {
            worst = rel;
            worst_i = i;
        }
    }
    if (bad > 0)
        fprintf(stderr, "  %s: %ld of %zu out of tolerance, worst [%zu] %.9g vs %.9g (rel %.3g)\n",
                what, bad, n, worst_i, (double)got[worst_i], want[worst_i], worst);
    if (worst_rel != NULL)
        *worst_rel = fmax(*worst_rel, worst);
    return bad;
}

static long compare_ff(const char *what, const float *got, const float *want, size_t n,
                       double *worst_rel)
{
    double *w = malloc(n * sizeof(double));
    long bad;

    if (w == NULL)
        return (long)n;
    for (size_t i = 0; i < n; i++)
        w[i] = want[i];
    bad = compare(what, got, w, n, worst_rel);
    free(w);
    return bad;
}

static struct gm_optim_config sgd_cfg(float mu, int nesterov, float wd)
{
    struct gm_optim_config c;

    gm_optim_config_default(&c, GM_OPTIM_SGD);
    c.momentum = mu;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    return c;
}

static struct gm_optim_config adam_cfg(float b1, float b2, float eps, float wd)
{
    struct gm_optim_config c;

    gm_optim_config_default(&c, GM_OPTIM_ADAM);
    c.beta1 = b1;
    c.beta2 = b2;
    c.eps = eps;
    c.weight_decay = wd;
    return c;
}

/* The configurations both comparisons run, with their base lr. */
static const struct {
    const char *name;
    int adam;
    float a, b, c, wd, lr; /* SGD: momentum, nesterov, -, wd; Adam: beta1, beta2, eps, wd */
} cases[] = {
    {"sgd", 0, 0.0f, 0, 0, 0.0f, 0.01f},
    {"sgd+wd", 0, 0.0f, 0, 0, 1e-2f, 0.01f},
    {"sgd+momentum", 0, 0.9f, 0, 0, 0.0f, 0.01f},
    {"sgd+momentum+wd", 0, 0.9f, 0, 0, 5e-2f, 0.01f},
    {"sgd+nesterov", 0, 0.9f, 1, 0, 0.0f, 0.01f},
    {"sgd+nesterov+wd", 0, 0.5f, 1, 0, 1e-2f, 0.01f},
    {"adam", 1, 0.9f, 0.999f, 1e-8f, 0.0f, 1e-3f},
    {"adam+wd", 1, 0.9f, 0.999f, 1e-8f, 1e-2f, 1e-3f},
    {"adam-b0.8-0.99-eps1e-6", 1, 0.8f, 0.99f, 1e-6f, 0.0f, 1e-2f},
};

static struct gm_optim_config case_cfg(size_t k)
{
    if (cases[k].adam)
        return adam_cfg(cases[k].a, cases[k].b, cases[k].c, cases[k].wd);
    return sgd_cfg(cases[k].a, (int)cases[k].b, cases[k].wd);
}

static void test_against_reference(void)
{
    struct problem *pr = malloc(sizeof(*pr));
    struct ref *r = malloc(sizeof(*r));
    float *p = malloc(N * sizeof(float));

    GM_CHECK(pr != NULL && r != NULL && p != NULL);
    if (pr == NULL || r == NULL || p == NULL)
        goto out;
    for (size_t k = 0; k < GM_ARRAY_SIZE(cases); k++) {
        struct gm_optim_config c = case_cfg(k);
        struct gm_optim o;
        double worst = 0.0;
        long bad = 0;

        make_problem(pr, 1000 + k, cases[k].lr);
        GM_CHECK_OK(gm_optim_init(&o, &c, N));
        memcpy(p, pr->p0, N * sizeof(float));
        ref_init(r, &c, pr->p0);
        for (int s = 0; s < STEPS; s++) {
            gm_optim_step(&o, p, pr->g[s], pr->lr[s]);
            ref_step(r, pr->g[s], pr->lr[s]);
        }
        GM_CHECK_EQ(o.step, STEPS);
        bad += compare("params", p, r->p, N, &worst);
        if (c.kind == GM_OPTIM_ADAM) {
            bad += compare("m", o.state, r->m, N, &worst);
            bad += compare("v", o.state + N, r->v, N, &worst);
        } else if (c.momentum != 0.0f) {
            bad += compare("momentum", o.state, r->buf, N, &worst);
        }
        /* the parameters really moved: a no-op step would not pass */
        GM_CHECK(fabs(r->p[0] - (double)pr->p0[0]) > 1e-3);
        fprintf(stderr, "  reference %-24s worst rel err %.2e\n", cases[k].name, worst);
        if (bad != 0)
            fprintf(stderr, "  case %s\n", cases[k].name);
        GM_CHECK_EQ(bad, 0);
        gm_optim_free(&o);
    }
out:
    free(pr);
    free(r);
    free(p);
}

/* Applies torch.optim to the same data. argv: dir n k. in.bin: p0[n], grads[k][n];
 * cfg.txt, one case a line: "sgd momentum nesterov wd lr[k]" or
 * "adam beta1 beta2 eps wd lr[k]"; writes out<line>.bin: params[n] then the state
 * (momentum_buffer, or exp_avg and exp_avg_sq). Exits 77 without torch. */
static const char torch_script[] =
    "import sys, array\n"
    "try:\n"
    "    import torch\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "d, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "blob = array.array('f')\n"
    "with open(d + '/in.bin', 'rb') as f:\n"
    "    blob.fromfile(f, n + k * n)\n"
    "p0 = torch.tensor(blob[:n].tolist(), dtype=torch.float32)\n"
    "grads = torch.tensor(blob[n:].tolist(), dtype=torch.float32).view(k, n)\n"
    "for idx, line in enumerate(open(d + '/cfg.txt')):\n"
    "    f = line.split()\n"
    "    h = [float(x) for x in f[1:]]\n"
    "    p = torch.nn.Parameter(p0.clone())\n"
    "    if f[0] == 'sgd':\n"
    "        lrs = h[3:]\n"
    "        opt = torch.optim.SGD([p], lr=lrs[0], momentum=h[0], nesterov=h[1] != 0,\n"
    "                              weight_decay=h[2])\n"
    "    else:\n"
    "        lrs = h[4:]\n"
    "        opt = torch.optim.Adam([p], lr=lrs[0], betas=(h[0], h[1]), eps=h[2],\n"
    "                               weight_decay=h[3])\n"
    "    for s in range(k):\n"
    "        opt.param_groups[0]['lr'] = lrs[s]\n"
    "        p.grad = grads[s].clone()\n"
    "        opt.step()\n"
    "    st = opt.state[p]\n"
    "    out = array.array('f', p.detach().tolist())\n"
    "    for key in ('momentum_buffer', 'exp_avg', 'exp_avg_sq'):\n"
    "        if st.get(key) is not None:\n"
    "            out.extend(st[key].tolist())\n"
    "    with open('%s/out%d.bin' % (d, idx), 'wb') as f:\n"
    "        out.tofile(f)\n";

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (f == NULL)
        return -errno;
    ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : -EIO;
}

/* Writes run.py, in.bin and cfg.txt into dir. */
static int write_torch_inputs(const char *dir, const struct problem *pr)
{
    char path[128];
    FILE *f;
    int err;

    snprintf(path, sizeof(path), "%s/run.py", dir);
    err = write_file(path, torch_script, sizeof(torch_script) - 1);
    if (err < 0)
        return err;
    snprintf(path, sizeof(path), "%s/in.bin", dir);
    err = write_file(path, pr->p0, sizeof(pr->p0));
    if (err < 0)
        return err;
    f = fopen(path, "ab");
    if (f == NULL)
        return -errno;
    if (fwrite(pr->g, sizeof(float), (size_t)TSTEPS * N, f) != (size_t)TSTEPS * N)
        err = -EIO;
    if (fclose(f) != 0)
        err = -EIO;
    if (err < 0)
        return err;

    snprintf(path, sizeof(path), "%s/cfg.txt", dir);
    f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    /* %.9g round-trips a float, so torch sees exactly our hyperparameters and lrs. */
    for (size_t k = 0; k < GM_ARRAY_SIZE(cases); k++) {
        if (cases[k].adam)
            fprintf(f, "adam %.9g %.9g %.9g %.9g", cases[k].a, cases[k].b, cases[k].c, cases[k].wd);
        else
            fprintf(f, "sgd %.9g %.9g %.9g", cases[k].a, cases[k].b, cases[k].wd);
        for (int s = 0; s < TSTEPS; s++)
            fprintf(f, " %.9g", cases[k].lr * pr->lr[s]);
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -EIO;
}

static void remove_dir(const char *dir)
{
    char path[128];
    const char *names[] = {"run.py", "cfg.txt", "in.bin"};

    for (size_t i = 0; i < GM_ARRAY_SIZE(names); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    for (size_t k = 0; k < GM_ARRAY_SIZE(cases); k++) {
        snprintf(path, sizeof(path), "%s/out%zu.bin", dir, k);
        unlink(path);
    }
    GM_CHECK(rmdir(dir) == 0);
}

static void test_against_torch(void)
{
    char dir[] = "/tmp/gm_test_optim_XXXXXX", path[128], cmd[256];
    struct problem *pr = malloc(sizeof(*pr));
    float *out = malloc(3 * N * sizeof(float)), *p = malloc(N * sizeof(float));
    int rc;

    GM_CHECK(pr != NULL && out != NULL && p != NULL);
    if (pr == NULL || out == NULL || p == NULL)
        goto out;
    GM_CHECK(mkdtemp(dir) != NULL);
    make_problem(pr, 77, 1.0f); /* unit lr schedule, scaled by each case's lr */
    GM_CHECK_OK(write_torch_inputs(dir, pr));

    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/run.py %s %d %d", dir, dir, N, TSTEPS);
    rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 127 || WEXITSTATUS(rc) == 77) {
        fprintf(stderr, "  note: /usr/bin/python3 with torch not available: "
                        "torch comparison skipped\n");
        goto out_dir;
    }
    GM_CHECK_EQ(WEXITSTATUS(rc), 0);
    if (WEXITSTATUS(rc) != 0)
        goto out_dir;

    for (size_t k = 0; k < GM_ARRAY_SIZE(cases); k++) {
        struct gm_optim_config c = case_cfg(k);
        struct gm_optim o;
        size_t len, got_len = 0;
        double worst = 0.0;
        long bad = 0;
        FILE *f;

        GM_CHECK_OK(gm_optim_init(&o, &c, N));
        memcpy(p, pr->p0, N * sizeof(float));
        for (int s = 0; s < TSTEPS; s++)
            gm_optim_step(&o, p, pr->g[s], cases[k].lr * pr->lr[s]);
        len = gm_optim_state_len(&o);
        snprintf(path, sizeof(path), "%s/out%zu.bin", dir, k);
        f = fopen(path, "rb");
        GM_CHECK(f != NULL);
        if (f != NULL) {
            got_len = fread(out, sizeof(float), 3 * N, f);
            fclose(f);
        }
        GM_CHECK_EQ(got_len, N + len);
        if (got_len == N + len) {
            bad += compare_ff("params", p, out, N, &worst);
            if (len > 0)
                bad += compare_ff("state", o.state, out + N, len, &worst);
        }
        fprintf(stderr, "  torch     %-24s worst rel err %.2e\n", cases[k].name, worst);
        GM_CHECK_EQ(bad, 0);
        gm_optim_free(&o);
    }
out_dir:
    remove_dir(dir);
out:
    free(pr);
    free(out);
    free(p);
}

/* Stopping after K steps, saving state + step, and resuming in a fresh optimizer
 * gives bitwise the parameters of an uninterrupted run; reset restarts exactly. */
static void test_checkpoint_and_reset(void)
{
    enum { K = 20, M = 20 };
    struct problem *pr = malloc(sizeof(*pr));
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));

    GM_CHECK(pr != NULL && a != NULL && b != NULL);
    if (pr == NULL || a == NULL || b == NULL)
        goto out;
    make_problem(pr, 5, 1.0f);
    for (size_t k = 0; k < GM_ARRAY_SIZE(cases); k++) {
        struct gm_optim_config c = case_cfg(k);
        struct gm_optim whole, first, resumed;
        size_t len;

        GM_CHECK_OK(gm_optim_init(&whole, &c, N));
        GM_CHECK_OK(gm_optim_init(&first, &c, N));
        GM_CHECK_OK(gm_optim_init(&resumed, &c, N));
        memcpy(a, pr->p0, N * sizeof(float));
        memcpy(b, pr->p0, N * sizeof(float));
        for (int s = 0; s < K + M; s++)
            gm_optim_step(&whole, a, pr->g[s], cases[k].lr);
        for (int s = 0; s < K; s++)
            gm_optim_step(&first, b, pr->g[s], cases[k].lr);

        /* "checkpoint": the state buffer and the step counter */
        len = gm_optim_state_len(&first);
        GM_CHECK_EQ(gm_optim_state_len(&resumed), len);
        if (len > 0)
            memcpy(gm_optim_state(&resumed), gm_optim_state(&first), len * sizeof(float));
        resumed.step = first.step;
        for (int s = K; s < K + M; s++)
            gm_optim_step(&resumed, b, pr->g[s], cases[k].lr);
        GM_CHECK(memcmp(a, b, N * sizeof(float)) == 0);
        if (len > 0)
            GM_CHECK(
                memcmp(gm_optim_state(&whole), gm_optim_state(&resumed), len * sizeof(float)) == 0);

        /* reset: zero state and step; K steps from p0 again equal the first K steps */
        GM_CHECK_OK(gm_optim_reset(&whole));
        GM_CHECK_EQ(whole.step, 0);
        for (size_t i = 0; i < len; i++)
            if (whole.state[i] != 0.0f) {
                GM_CHECK(whole.state[i] == 0.0f);
                break;
            }
        memcpy(a, pr->p0, N * sizeof(float));
        memcpy(b, pr->p0, N * sizeof(float));
        GM_CHECK_OK(gm_optim_reset(&first));
        for (int s = 0; s < K; s++) {
            gm_optim_step(&whole, a, pr->g[s], cases[k].lr);
            gm_optim_step(&first, b, pr->g[s], cases[k].lr);
        }
        GM_CHECK(memcmp(a, b, N * sizeof(float)) == 0);
        GM_CHECK(memcmp(a, pr->p0, N * sizeof(float)) != 0);
        gm_optim_free(&whole);
        gm_optim_free(&first);
        gm_optim_free(&resumed);
    }
out:
    free(pr);
    free(a);
    free(b);
}

/* Hand-checked single steps: SGD's first momentum step uses buf = d (torch clones
 * the gradient); Adam's first step moves every parameter by about lr. */
static void test_first_steps(void)
{
    struct gm_optim_config c = sgd_cfg(0.9f, 0, 0.0f);
    struct gm_optim o;
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -1.0f, 4.0f};

    GM_CHECK_OK(gm_optim_init(&o, &c, 3));
    gm_optim_step(&o, p, g, 0.1f);
    GM_CHECK(o.state[0] == 0.5f && o.state[1] == -1.0f && o.state[2] == 4.0f);
    GM_CHECK_NEAR(p[0], 0.95, 0, 1e-7);
    gm_optim_step(&o, p, g, 0.1f); /* buf = 0.9*0.5 + 0.5 = 0.95; p = 0.95 - 0.095 */
    GM_CHECK_NEAR(o.state[0], 0.95, 0, 1e-7);
    GM_CHECK_NEAR(p[0], 0.855, 0, 1e-7);
    gm_optim_free(&o);

    c = adam_cfg(0.9f, 0.999f, 1e-8f, 0.0f);
    p[0] = 1.0f, p[1] = -2.0f, p[2] = 0.5f;
    GM_CHECK_OK(gm_optim_init(&o, &c, 3));
    gm_optim_step(&o, p, g, 0.01f); /* mhat = g, vhat = g^2: p -= lr * sign(g) */
    GM_CHECK_NEAR(p[0], 0.99, 0, 1e-6);
    GM_CHECK_NEAR(p[1], -1.99, 0, 1e-6);
    GM_CHECK_NEAR(p[2], 0.49, 0, 1e-6);
    GM_CHECK_EQ(o.step, 1);
    gm_optim_free(&o);
}

static void test_schedules(void)
{
    struct gm_sched s = {.kind = GM_SCHED_CONSTANT, .base_lr = 0.1f, .warmup_steps = 10};
    const double base = 0.1, lo = 0.001;

    /* warm-up ramp: base * (step + 1) / warmup */
    GM_CHECK_OK(gm_sched_check(&s));
    GM_CHECK_NEAR(gm_sched_lr(&s, 0), 0.01, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 4), 0.05, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 9), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 10), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 100000), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, -3), 0.01, 0, 1e-6);
    for (long t = 1; t < 10; t++)
        GM_CHECK(gm_sched_lr(&s, t) > gm_sched_lr(&s, t - 1));
    s.warmup_steps = 0;
    GM_CHECK_NEAR(gm_sched_lr(&s, 0), 0.1, 0, 1e-7);

    /* step decay: boundaries at warmup + j*step_size */
    s = (struct gm_sched){.kind = GM_SCHED_STEP, .base_lr = 0.1f, .step_size = 30, .gamma = 0.1f};
    GM_CHECK_OK(gm_sched_check(&s));
    GM_CHECK_NEAR(gm_sched_lr(&s, 0), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 29), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 30), 0.01, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 59), 0.01, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 60), 0.001, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 95), 1e-4, 0, 1e-6);
    s.warmup_steps = 5;
    GM_CHECK_NEAR(gm_sched_lr(&s, 2), 0.06, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 34), 0.1, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 35), 0.01, 0, 1e-6);

    /* cosine over total - warmup = 100 steps: base, midpoint, quarter, min, after */
    s = (struct gm_sched){.kind = GM_SCHED_COSINE,
                          .base_lr = 0.1f,
                          .min_lr = 0.001f,
                          .warmup_steps = 10,
                          .total_steps = 110};
    GM_CHECK_OK(gm_sched_check(&s));
    GM_CHECK_NEAR(gm_sched_lr(&s, 9), base, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 10), base, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 35), lo + (base - lo) * (1 + cos(M_PI / 4)) / 2, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 60), (base + lo) / 2, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 109), lo + (base - lo) * (1 + cos(M_PI * 0.99)) / 2, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 110), lo, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 5000), lo, 0, 1e-6);
    for (long t = 11; t <= 110; t++)
        GM_CHECK(gm_sched_lr(&s, t) <= gm_sched_lr(&s, t - 1));
    s.warmup_steps = 0;
    s.total_steps = 100;
    GM_CHECK_NEAR(gm_sched_lr(&s, 0), base, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 50), (base + lo) / 2, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 100), lo, 0, 1e-6);

    /* rejected schedules: gm_sched_check says so, gm_sched_lr stays finite */
    s = (struct gm_sched){.kind = GM_SCHED_STEP, .base_lr = 0.1f, .step_size = 0, .gamma = 0.5f};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    GM_CHECK_NEAR(gm_sched_lr(&s, 7), 0.1, 0, 1e-6);
    s.step_size = 10;
    s.gamma = 0.0f;
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    s = (struct gm_sched){.kind = GM_SCHED_COSINE,
                          .base_lr = 0.1f,
                          .min_lr = 0.01f,
                          .warmup_steps = 10,
                          .total_steps = 10};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    GM_CHECK_NEAR(gm_sched_lr(&s, 10), 0.01, 0, 1e-6);
    GM_CHECK_NEAR(gm_sched_lr(&s, 4), 0.05, 0, 1e-6);
    s = (struct gm_sched){.kind = GM_SCHED_CONSTANT, .base_lr = -1.0f};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    s = (struct gm_sched){.kind = GM_SCHED_CONSTANT, .base_lr = NAN};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    s = (struct gm_sched){.kind = GM_SCHED_CONSTANT, .base_lr = 0.1f, .warmup_steps = -1};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    s = (struct gm_sched){.kind = (enum gm_sched_kind)42, .base_lr = 0.1f};
    GM_CHECK_ERR(gm_sched_check(&s), -EINVAL);
    GM_CHECK_ERR(gm_sched_check(NULL), -EINVAL);
}

static void expect_einval(struct gm_optim_config c, size_t n)
{
    struct gm_optim o;

    memset(&o, 0xA5, sizeof(o)); /* init must clear it even on failure */
    GM_CHECK_ERR(gm_optim_init(&o, &c, n), -EINVAL);
    GM_CHECK(o.state == NULL && o.n == 0 && o.step == 0);
    gm_optim_free(&o); /* free after a failed init */
    gm_optim_free(&o);
}

static void test_contracts(void)
{
    struct gm_optim_config c;
    struct gm_optim o;

    gm_optim_config_default(&c, GM_OPTIM_ADAM);
    GM_CHECK(c.kind == GM_OPTIM_ADAM && c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
    GM_CHECK(c.weight_decay == 0.0f);
    gm_optim_config_default(&c, GM_OPTIM_SGD);
    GM_CHECK(c.kind == GM_OPTIM_SGD && c.momentum == 0.0f && !c.nesterov);

    /* bad configurations */
    expect_einval(sgd_cfg(-0.1f, 0, 0.0f), 10);
    expect_einval(sgd_cfg(NAN, 0, 0.0f), 10);
    expect_einval(sgd_cfg(INFINITY, 0, 0.0f), 10);
    expect_einval(sgd_cfg(0.0f, 1, 0.0f), 10); /* Nesterov without momentum */
    expect_einval(sgd_cfg(0.9f, 0, -1e-4f), 10);
    expect_einval(sgd_cfg(0.9f, 0, NAN), 10);
    expect_einval(sgd_cfg(0.9f, 0, 0.0f), 0); /* no parameters */
    expect_einval(adam_cfg(1.0f, 0.999f, 1e-8f, 0.0f), 10);
    expect_einval(adam_cfg(-0.1f, 0.999f, 1e-8f, 0.0f), 10);
    expect_einval(adam_cfg(0.9f, 1.0f, 1e-8f, 0.0f), 10);
    expect_einval(adam_cfg(0.9f, NAN, 1e-8f, 0.0f), 10);
    expect_einval(adam_cfg(0.9f, 0.999f, -1e-8f, 0.0f), 10);
    expect_einval(adam_cfg(0.9f, 0.999f, 1e-8f, -0.5f), 10);
    c.kind = (enum gm_optim_kind)7;
    expect_einval(c, 10);
    GM_CHECK_ERR(gm_optim_init(&o, NULL, 10), -EINVAL);
    gm_optim_free(&o);
    gm_optim_free(NULL);

    /* a state size whose byte count overflows is refused before any allocation */
    c = adam_cfg(0.9f, 0.999f, 1e-8f, 0.0f);
    GM_CHECK_ERR(gm_optim_init(&o, &c, SIZE_MAX / 2), -ENOMEM);
    GM_CHECK(o.state == NULL);
    gm_optim_free(&o);

    /* edge values torch accepts */
    GM_CHECK_OK(gm_optim_init(&o, &(struct gm_optim_config){.kind = GM_OPTIM_ADAM}, 4));
    gm_optim_free(&o);

    /* state lengths per kind */
    c = sgd_cfg(0.0f, 0, 1e-4f);
    GM_CHECK_OK(gm_optim_init(&o, &c, 100));
    GM_CHECK_EQ(gm_optim_state_len(&o), 0);
    GM_CHECK(gm_optim_state(&o) == NULL);
    GM_CHECK_OK(gm_optim_reset(&o)); /* no state: still fine */
    gm_optim_free(&o);
    gm_optim_free(&o);
    c = sgd_cfg(0.9f, 1, 0.0f);
    GM_CHECK_OK(gm_optim_init(&o, &c, 100));
    GM_CHECK_EQ(gm_optim_state_len(&o), 100);
    GM_CHECK(gm_optim_state(&o) != NULL);
    gm_optim_free(&o);
    GM_CHECK(o.state == NULL && o.n == 0);
    GM_CHECK_EQ(gm_optim_state_len(&o), 0);
    gm_optim_free(&o);
    c = adam_cfg(0.9f, 0.999f, 1e-8f, 0.0f);
    GM_CHECK_OK(gm_optim_init(&o, &c, 100));
    GM_CHECK_EQ(gm_optim_state_len(&o), 200);
    for (size_t i = 0; i < 200; i++)
        if (o.state[i] != 0.0f) {
            GM_CHECK(o.state[i] == 0.0f); /* state starts zeroed */
            break;
        }
    gm_optim_free(&o);
    gm_optim_free(&o);
}

int main(void)
{
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_first_steps);
    GM_TEST_RUN(test_schedules);
    GM_TEST_RUN(test_against_reference);
    GM_TEST_RUN(test_checkpoint_and_reset);
    GM_TEST_RUN(test_against_torch);
    return gm_test_finish("test_optim");
}

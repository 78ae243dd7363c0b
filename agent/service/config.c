/*
 * agent/service/config.c - see config.h.  Parsed with inih, written with stdio.
 *
 * How it works: the file is read whole (at most CONFIG_MAX bytes) and handed to
 * common/ini.c (the reader train/job.c uses too), which feeds inih one line at a time, so
 * each key's line is known, and stops at the first problem.  Keys are a table {section, key,
 * kind, field}; set() checks and stores one value; checks across keys (metrics listen vs
 * metrics_public, the required names) run after the last line (check_whole).  The first
 * problem is logged once, as a sentence: "FILE:LINE: problem".
 */
#include "agent/service/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/ini.h"
#include "common/log.h"
#include "discovery/discovery.h"

#define CONFIG_MAX 65536
/* inih reads a line into a fixed buffer of INI_MAX_LINE (200) bytes, "\r\n" and NUL
 * included; a longer line would be split silently, so common/ini.c refuses it. */
#define LINE_MAX_BYTES 197
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1) /* 107 bytes */

enum kind {
    K_NAME,   /* cluster/node name (gm_id_name_valid) */
    K_ADDR,   /* ip:port */
    K_PATH,   /* absolute path */
    K_STR,    /* free text that fits */
    K_PEERS,  /* host:port, comma-separated */
    K_GROUP,  /* multicast group:port or off */
    K_BOOL,   /* yes|no */
    K_DEVICE, /* struct gm_device_spec: auto|cpu|cuda|cuda:N|cuda:all */
    K_THREADS,
    K_METRICS, /* ip:port or empty */
    K_TIMEOUT, /* seconds, 5..3600 */
    K_MBIT,    /* whole Mbit/s, 0..100000 */
};

/* An entry: {section, key, kind, F(field)}; the kinds carry their own limits (set()). */
#define F(f) .off = offsetof(struct gm_config, f), .size = sizeof(((struct gm_config *)0)->f)
static const struct gm_ini_key keys[] = {
    {"cluster", "name", K_NAME, F(cluster)},
    {"node", "id", K_NAME, F(node)},
    {"node", "listen", K_ADDR, F(listen)},
    {"node", "state_dir", K_PATH, F(state_dir)},
    {"node", "control", K_PATH, F(control)},
    {"node", "peer_timeout", K_TIMEOUT, F(peer_timeout_s)},
    {"node", "max_tunnel_mbit", K_MBIT, F(max_tunnel_mbit)},
    {"discovery", "multicast", K_GROUP, F(multicast)},
    {"discovery", "peers", K_PEERS, F(peers)},
    {"discovery", "tunnels", K_STR, F(tunnels)},
    {"discovery", "interfaces", K_STR, F(interfaces)},
    {"discovery", "measure", K_BOOL, F(measure)},
    {"train", "device", K_DEVICE, F(device)},
    {"train", "threads", K_THREADS, F(threads)},
    {"metrics", "listen", K_METRICS, F(metrics)},
    {"metrics", "metrics_public", K_BOOL, F(metrics_public)},
};
#undef F
#define NKEYS (sizeof(keys) / sizeof(keys[0]))
static const char *const sections[] = {"cluster", "node", "discovery", "train", "metrics"};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

/* A value for a message: control bytes as '?', at most 80 bytes. */
static const char *shown(char dst[84], const char *s)
{
    size_t i;

    for (i = 0; i < 80 && s[i] != '\0'; i++)
        dst[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i] != '\0' && i == 80)
        memcpy(dst + i - 3, "...", 3);
    dst[i] = '\0';
    return dst;
}

/* Levenshtein distance, capped at 9 (keys are short). */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[32];

    if (la > 30 || lb > 30)
        return 9;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0], best;
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] < 9 ? row[lb] : 9;
}

static void unknown_key(struct gm_ini *ini, const char *section, const char *key)
{
    char k[84], hint[128] = "";
    int best = 3;

    for (size_t i = 0; i < NKEYS; i++) {
        int d = strcmp(keys[i].section, section) == 0 ? distance(key, keys[i].key) : 9;
        if (d < best) {
            best = d;
            snprintf(hint, sizeof(hint), " (did you mean '%s'?)", keys[i].key);
        }
    }
    for (size_t i = 0; hint[0] == '\0' && i < NKEYS; i++)
        if (strcmp(keys[i].key, key) == 0)
            snprintf(hint, sizeof(hint), " (it belongs in [%s])", keys[i].section);
    gm_ini_fail(ini, ini->line, "unknown key '%s' in [%s]%s; see gradmesh.conf(5)", shown(k, key),
                section, hint);
}

static void unknown_section(struct gm_ini *ini, const char *s, size_t len)
{
    char name[84], tmp[84];
    size_t l = len < 80 ? len : 80;

    memcpy(tmp, s, l);
    tmp[l] = '\0';
    gm_ini_fail(ini, ini->line,
                "unknown section [%s] (known: cluster, node, discovery, train, metrics)",
                shown(name, tmp));
}

static void outside(struct gm_ini *ini, const char *key)
{
    char ks[84];

    gm_ini_fail(ini, ini->line, "'%s' is outside any section (put it under [cluster], [node], ...)",
                shown(ks, key));
}

static void twice(struct gm_ini *ini, const struct gm_ini_key *k, int first_line)
{
    gm_ini_fail(ini, ini->line, "[%s] %s is set twice (first on line %d)", k->section, k->key,
                first_line);
}

static int peers_valid(const char *v)
{
    char buf[sizeof(((struct gm_config *)0)->peers)], *tok, *save = NULL;

    snprintf(buf, sizeof(buf), "%s", v);
    for (tok = strtok_r(buf, ", \t", &save); tok != NULL; tok = strtok_r(NULL, ", \t", &save)) {
        const char *colon = strrchr(tok, ':');
        char *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
        if (colon == NULL || colon == tok || colon[1] == '\0' || *end != '\0' || port <= 0 ||
            port > 65535 || strlen(tok) >= GM_ADDR_MAX)
            return 0;
    }
    return 1;
}

/* Checks and stores one value; "" where a problem was recorded. */
static void set(struct gm_ini *ini, const struct gm_ini_key *k, const char *v)
{
    char *field = (char *)ini->dest + k->off;
    char sv[84];
    struct sockaddr_storage ss;
    struct sockaddr_in g;
    const char *want = NULL;
    int iv;

    if (v[0] == '\0' && k->type != K_NAME && k->type != K_ADDR &&
        !(k->type == K_PATH && strcmp(k->key, "state_dir") == 0))
        return; /* empty: the default (gm_config_defaults; control: STATE_DIR/control.sock) */
    switch ((enum kind)k->type) {
    case K_BOOL:
        if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
            want = "yes or no";
            break;
        }
        iv = strcmp(v, "yes") == 0;
        memcpy(field, &iv, sizeof(iv));
        return;
    case K_THREADS:
    case K_MBIT:
    case K_TIMEOUT: {
        const long lo = k->type == K_TIMEOUT ? 5 : 0, hi = k->type == K_THREADS ? 4096
                                                           : k->type == K_MBIT  ? 100000
                                                                                : 3600;
        char *end = NULL;
        long t;
        errno = 0;
        t = strtol(v, &end, 10);
        if (*v < '0' || *v > '9' || *end != '\0' || errno != 0 || t < lo || t > hi) {
            want = k->type == K_THREADS ? "a whole number from 0 (every core) to 4096"
                   : k->type == K_MBIT  ? "a whole number of Mbit/s from 0 (no cap) to 100000"
                                        : "a whole number of seconds from 5 to 3600";
            break;
        }
        iv = (int)t;
        memcpy(field, &iv, sizeof(iv));
        return;
    }
    case K_NAME:
        if (!gm_id_name_valid(v))
            want = "1 to 63 characters of a-z 0-9 . _ -";
        break;
    case K_ADDR:
        if (gm_proto_addr_parse(v, &ss) != 0)
            want = "IP:PORT, e.g. 0.0.0.0:7450 or [::]:7450";
        break;
    case K_METRICS:
        if (strcmp(v, "off") == 0) {
            field[0] = '\0';
            return;
        }
        if (gm_proto_addr_parse(v, &ss) != 0)
            want = "IP:PORT, e.g. " GM_METRICS_DEFAULT ", or off";
        break;
    case K_PATH:
        if (v[0] != '/')
            want = "an absolute path";
        else if (strcmp(k->key, "control") == 0 && strlen(v) > SOCKET_PATH_MAX)
            want = "a unix socket path of at most 107 bytes";
        break;
    case K_PEERS:
        if (!peers_valid(v))
            want = "HOST:PORT entries separated by commas";
        break;
    case K_GROUP:
        if (strcmp(v, "off") == 0) {
            field[0] = '\0';
            return;
        }
        if (gm_disc_parse_group(v, &g) != 0)
            want = "an IPv4 multicast GROUP:PORT (e.g. " GM_DISC_GROUP_DEFAULT ") or off";
        break;
    case K_DEVICE: {
        struct gm_device_spec d;
        if (gm_device_spec_parse(v, &d) != 0) {
            want = "auto, cpu, cuda, cuda:N (a GPU number) or cuda:all";
            break;
        }
        memcpy(field, &d, sizeof(d));
        return;
    }
    case K_STR:
        break;
    }
    /* gm_config_save writes "key = value": a value that line cannot hold (the reader's
     * LINE_MAX_BYTES) would load once and never again, so it is refused here too */
    if (want == NULL && (strlen(v) >= k->size || strlen(k->key) + 3 + strlen(v) > LINE_MAX_BYTES))
        want = "shorter";
    if (want != NULL) {
        gm_ini_fail(ini, ini->line, "[%s] %s = %s: must be %s", k->section, k->key, shown(sv, v),
                    want);
        return;
    }
    memcpy(field, v, strlen(v) + 1);
}

int gm_config_addr_is_loopback(const char *addr)
{
    struct sockaddr_storage ss;

    if (gm_proto_addr_parse(addr, &ss) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

static void check_whole(struct gm_ini *ini)
{
    struct gm_config *c = ini->dest;
    static const char *const required[][2] = {
        {"cluster", "name"}, {"node", "id"}, {"node", "listen"}, {"node", "state_dir"}};

    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        if (gm_ini_line_of(ini, required[i][0], required[i][1]) == 0) {
            gm_ini_fail(ini, 0, "missing [%s] %s (gradmesh init and join write it)", required[i][0],
                        required[i][1]);
            return;
        }
    }
    if (c->metrics[0] != '\0' && !c->metrics_public && !gm_config_addr_is_loopback(c->metrics)) {
        gm_ini_fail(
            ini, gm_ini_line_of(ini, "metrics", "listen"),
            "[metrics] listen = %s is not a loopback address: the metrics name nodes, "
            "addresses and jobs; set metrics_public = yes in [metrics] to serve them to the "
            "network, or listen on 127.0.0.1",
            c->metrics);
        return;
    }
    if (c->control[0] == '\0') {
        const size_t n = strlen(c->state_dir);
        char sd[84];
        if (n + strlen("/control.sock") > SOCKET_PATH_MAX) {
            gm_ini_fail(
                ini, gm_ini_line_of(ini, "node", "state_dir"),
                "the control socket %s/control.sock would be longer than %zu bytes (the limit "
                "of a unix socket path); set [node] control to a shorter path",
                shown(sd, c->state_dir), SOCKET_PATH_MAX);
            return;
        }
        memcpy(c->control, c->state_dir, n);
        memcpy(c->control + n, "/control.sock", sizeof("/control.sock"));
    }
}

static const struct gm_ini_spec spec = {
    .keys = keys,
    .nkeys = NKEYS,
    .sections = sections,
    .nsections = NSECTIONS,
    .line_max = LINE_MAX_BYTES,
    .set = set,
    .whole = check_whole,
    .outside = outside,
    .unknown_section = unknown_section,
    .unknown_key = unknown_key,
    .twice = twice,
};

int gm_config_parse(const char *text, size_t len, const char *origin, struct gm_config *c)
{
    gm_config_defaults(c);
    if (origin == NULL)
        origin = "config";
    if (len > CONFIG_MAX) {
        gm_err("%s: larger than %d bytes: not a gradmesh config", origin, CONFIG_MAX);
        return GM_ERR_CONFIG;
    }
    return gm_ini_parse(&spec, text, len, origin, c);
}

/* One sentence for a person: what is wrong with the file and what to do. */
static void unreadable(const char *path, int errnum)
{
    static const char *const todo =
        "make one with `gradmesh init --cluster NAME` (a new cluster) or `gradmesh join "
        "TOKEN` (an existing one), or name another with --config FILE or $GRADMESH_CONFIG";
    struct stat st;

    if (errnum == ENOENT) {
        gm_err("there is no config at %s: %s", path, todo);
    } else if (errnum == EACCES && stat(path, &st) == 0) {
        struct passwd *pw = getpwuid(st.st_uid);
        gm_err("the config %s is not readable by this user (uid %u): it belongs to %s (mode "
               "%03o); run as root or as %s, or name another with --config FILE",
               path, (unsigned)geteuid(), pw != NULL ? pw->pw_name : "another user",
               (unsigned)(st.st_mode & 0777), pw != NULL ? pw->pw_name : "its owner");
    } else if (errnum == EISDIR) {
        gm_err("the config %s is a directory: name the file itself with --config FILE", path);
    } else {
        gm_err("cannot read the config %s: %s; %s", path, strerror(errnum), todo);
    }
}

int gm_config_load(const char *path, struct gm_config *c)
{
    char *buf;
    size_t len = 0;
    int fd, err;

    gm_config_defaults(c);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
        unreadable(path, err);
        return err == EACCES ? -EACCES : GM_ERR_CONFIG; /* a permission, not the config's text */
    }
    buf = malloc(CONFIG_MAX + 1);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        ssize_t r = read(fd, buf + len, CONFIG_MAX + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            unreadable(path, errno);
            free(buf);
            close(fd);
            return GM_ERR_CONFIG;
        }
        if (r == 0 || (len += (size_t)r) > CONFIG_MAX)
            break;
    }
    close(fd);
    err = gm_config_parse(buf, len, path, c);
    free(buf);
    return err;
}

void gm_config_defaults(struct gm_config *c)
{
    memset(c, 0, sizeof(*c));
    c->device.want = GM_DEVICE_WANT_AUTO;
    snprintf(c->multicast, sizeof(c->multicast), "%s", GM_DISC_GROUP_DEFAULT);
    c->measure = 1;
    c->peer_timeout_s = GM_DEFAULT_PEER_TIMEOUT_S;
    snprintf(c->metrics, sizeof(c->metrics), "%s", GM_METRICS_DEFAULT);
}

const char *gm_config_path(const char *flag)
{
    const char *env = getenv("GRADMESH_CONFIG");

    if (flag != NULL)
        return flag;
    if (env != NULL && env[0] != '\0')
        return env;
    return GM_DEFAULT_CONFIG;
}

int gm_config_save(const char *path, const struct gm_config *c)
{
    char buf[8192], device[GM_DEVICE_SPEC_LEN];
    int n;

    gm_device_spec_format(&c->device, device, sizeof(device));
    n = snprintf(buf, sizeof(buf),
                 "# gradmesh agent configuration (written by gradmesh init/join; every key is\n"
                 "# in gradmesh.conf(5))\n"
                 "[cluster]\nname = %s\n\n"
                 "[node]\nid = %s\nlisten = %s\nstate_dir = %s\ncontrol = %s\n"
                 "# peer_timeout: seconds of silence before a member is dropped (a job\n"
                 "# re-forms without it); long enough for pings behind bulk on a slow tunnel\n"
                 "peer_timeout = %d\n"
                 "# max_tunnel_mbit: at most this many Mbit/s of training traffic leave on\n"
                 "# each link of class tunnel (0: no cap), so a shared tunnel is not starved\n"
                 "max_tunnel_mbit = %d\n\n"
                 "[discovery]\n"
                 "# multicast: group for LAN beacons (\"off\" to disable)\n"
                 "multicast = %s\n"
                 "# peers: static endpoints host:port, comma-separated (VPN, WAN)\n"
                 "peers = %s\n"
                 "# tunnels: interfaces to class as tunnels besides tun/tap/wg/ppp\n"
                 "tunnels = %s\n"
                 "# interfaces: send beacons only on these (empty: every suitable one)\n"
                 "interfaces = %s\n"
                 "measure = %s\n\n"
                 "[train]\ndevice = %s\nthreads = %d\n\n"
                 "[metrics]\n"
                 "# listen: the Prometheus endpoint (empty: " GM_METRICS_DEFAULT "; off: none;\n"
                 "# several agents on one host need a port each)\n"
                 "listen = %s\n"
                 "# metrics_public: yes allows a non-loopback listen address\n"
                 "metrics_public = %s\n",
                 c->cluster, c->node, c->listen, c->state_dir, c->control, c->peer_timeout_s,
                 c->max_tunnel_mbit, c->multicast[0] ? c->multicast : "off", c->peers, c->tunnels,
                 c->interfaces, c->measure ? "yes" : "no", device, c->threads,
                 c->metrics[0] ? c->metrics : "off", c->metrics_public ? "yes" : "no");
    if (n < 0 || n >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    return gm_id_write_file(path, buf, (size_t)n, 0644);
}

int gm_config_state_path(const struct gm_config *c, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", c->state_dir, name);

    return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

/* "gradmesh:gradmesh (uid 998)"-style names of a uid and gid. */
static void id_names(uid_t uid, gid_t gid, char *out, size_t cap)
{
    struct passwd *pw = getpwuid(uid);
    struct group *gr = getgrgid(gid);
    char u[64], g[64];

    if (pw != NULL)
        snprintf(u, sizeof(u), "%s", pw->pw_name);
    else
        snprintf(u, sizeof(u), "%u", (unsigned)uid);
    if (gr != NULL)
        snprintf(g, sizeof(g), "%s", gr->gr_name);
    else
        snprintf(g, sizeof(g), "%u", (unsigned)gid);
    snprintf(out, cap, "%s:%s", u, g);
}

/* path (a file or folder of the state directory) is not ours to use: one line that names it,
 * its owner and mode, the user the agent runs as, and the chown that fixes it. */
static int not_ours(const struct gm_config *c, const char *path, int errnum)
{
    char have[160], want[160];
    struct stat st;

    id_names(geteuid(), getegid(), want, sizeof(want));
    if (stat(path, &st) != 0) {
        gm_err("the agent (running as %s) cannot use %s: %s; give the state directory to that "
               "user: chown -R %s %s",
               want, path, strerror(errnum), want, c->state_dir);
        return -EACCES;
    }
    id_names(st.st_uid, st.st_gid, have, sizeof(have));
    gm_err("the agent (running as %s) cannot %s %s: %s; it belongs to %s (mode %03o) and must be "
           "%s's: chown -R %s %s",
           want, S_ISDIR(st.st_mode) ? "write in" : "read", path, strerror(errnum), have,
           (unsigned)(st.st_mode & 0777), want, want, c->state_dir);
    return -EACCES;
}

int gm_config_check_state(const struct gm_config *c)
{
    char path[GM_PATH_MAX];
    struct dirent *e;
    DIR *d;
    int err = 0;

    if (access(c->state_dir, F_OK) != 0 && errno == ENOENT)
        return 0; /* the identity's loader says what is missing */
    if (faccessat(AT_FDCWD, c->state_dir, R_OK | W_OK | X_OK, AT_EACCESS) != 0)
        return errno == EACCES || errno == EPERM ? not_ours(c, c->state_dir, errno) : -errno;
    d = opendir(c->state_dir);
    if (d == NULL)
        return -errno;
    while (err == 0 && (e = readdir(d)) != NULL) {
        struct stat st;
        int want;

        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strstr(e->d_name, ".tmp.") != NULL) /* a crashed writer's temp file: not read */
            continue;
        if (gm_config_state_path(c, e->d_name, path, sizeof(path)) != 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            want = R_OK | W_OK | X_OK;
        else if (S_ISREG(st.st_mode))
            want = R_OK;
        else
            continue; /* a socket, a link: not the agent's files */
        if (faccessat(dirfd(d), e->d_name, want, AT_EACCESS) != 0 &&
            (errno == EACCES || errno == EPERM))
            err = not_ours(c, path, errno);
    }
    closedir(d);
    return err;
}

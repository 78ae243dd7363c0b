/*
 * agent/cli/cli_net.c - `gradmesh init | join | token | agent | status`.
 *
 * Contract: the command line in README.md and gradmesh(1).  Exit codes: 0 ok, 1 runtime
 * failure, 2 usage, 78 configuration error (bad config or token).  Tokens are
 * printed on stdout only (never logged); everything else goes to the log.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/agent.h"
#include "agent/cli/cli.h"
#include "agent/service/config.h"
#include "agent/cluster/joiner.h"
#include "agent/mesh/members.h"
#include "common/log.h"
#include "crypto/beacon.h"
#include "crypto/identity.h"
#include "crypto/token.h"
#include "discovery/discovery.h"

#define FIND_WAIT_S 15 /* join without --peer: how long to look for an admitter */

/*
 * Who writes the state directory.  Everything init and join put there (the directory itself
 * when they make it, keys, certificates, members) belongs to the directory's owner: the user
 * the agent runs as, which must read and write it.  Run as root over a directory someone else
 * owns (the README's install: systemd-tmpfiles makes /var/lib/gradmesh for user gradmesh, then
 * `sudo gradmesh init`), the command takes that user's identity (effective uid, gid and groups)
 * while it writes there and root's back for the config in /etc/gradmesh.  Writing as the owner,
 * rather than writing as root and chown'ing, means root never opens, renames or chowns a path
 * inside a directory another user controls (no symlink or hard-link games to lose), and each
 * file is the owner's from its first byte.  The owner is the state directory's, or, when init
 * makes it, that of the nearest folder above it (/var/lib/gradmesh for
 * /var/lib/gradmesh/CLUSTER).  A root-owned folder, or a command not run as root: no change.
 */
struct state_owner {
    uid_t uid;
    gid_t gid;
    int switched;     /* effective ids are uid/gid until owner_restore() */
    gid_t egid;       /* root's, put back by owner_restore() */
    gid_t groups[64]; /* root's supplementary groups, put back by owner_restore() */
    int n_groups;
};

/* The owner of dir, or of the nearest existing folder above it. */
static int owner_of(const char *dir, uid_t *uid, gid_t *gid)
{
    char tmp[GM_PATH_MAX];
    struct stat st;
    char *slash;

    if (strlen(dir) >= sizeof(tmp))
        return -ENAMETOOLONG;
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (;;) {
        if (stat(tmp[0] != '\0' ? tmp : "/", &st) == 0) {
            *uid = st.st_uid;
            *gid = st.st_gid;
            return 0;
        }
        if (errno != ENOENT)
            return -errno;
        slash = strrchr(tmp, '/');
        if (strcmp(tmp, ".") == 0)
            return -ENOENT; /* the working folder itself is gone */
        if (slash == NULL) {
            snprintf(tmp, sizeof(tmp), ".");
            continue;
        }
        *slash = '\0';
    }
}

/* Root's effective identity -> the state directory owner's (see struct state_owner). */
static int owner_become(struct state_owner *o, const char *dir)
{
    int err;

    memset(o, 0, sizeof(*o));
    if (geteuid() != 0)
        return 0;
    err = owner_of(dir, &o->uid, &o->gid);
    if (err != 0 || o->uid == 0)
        return err;
    o->egid = getegid();
    o->n_groups = getgroups((int)(sizeof(o->groups) / sizeof(o->groups[0])), o->groups);
    if (o->n_groups < 0)
        return -errno;
    if (setgroups(1, &o->gid) != 0 || setegid(o->gid) != 0)
        return -errno;
    if (seteuid(o->uid) != 0)
        return -errno;
    o->switched = 1;
    return 0;
}

/* Back to root, for what is root's (the config in /etc/gradmesh).  0 or -errno. */
static int owner_restore(struct state_owner *o)
{
    if (!o->switched)
        return 0;
    o->switched = 0;
    if (seteuid(0) != 0 || setegid(o->egid) != 0 || setgroups((size_t)o->n_groups, o->groups) != 0)
        return -errno;
    return 0;
}

/* The state directory could not be made or written: which folder, whose it is, what to do
 * (returns the exit code). */
static int state_dir_problem(const char *cmd, const char *dir, int err)
{
    char where[GM_PATH_MAX];
    struct passwd *pw;
    uid_t uid = 0;
    gid_t gid = 0;

    if (err != -EACCES && err != -EPERM && err != -EROFS)
        return gm_cli_fail(cmd, err, "state directory");
    snprintf(where, sizeof(where), "%s", dir);
    if (owner_of(dir, &uid, &gid) != 0)
        uid = (uid_t)-1;
    pw = uid != (uid_t)-1 ? getpwuid(uid) : NULL;
    fprintf(stderr,
            "gradmesh %s: cannot write the state directory %s: %s; it (or the folder above it) "
            "belongs to %s (uid %d) and this command runs as uid %u: run it as root (it then "
            "writes for that user) or as %s, or name another folder with --state DIR\n",
            cmd, where, gm_strerror(err), pw != NULL ? pw->pw_name : "?", (int)uid,
            (unsigned)geteuid(), pw != NULL ? pw->pw_name : "its owner");
    return GM_EXIT_RUNTIME;
}

/* mkdir -p with mode 0700 for the last component (folders made recorded in made); the result
 * made absolute. */
static int make_state_dir(const char *dir, char *abs, size_t cap, struct gm_cli_made *made)
{
    int err = gm_cli_mkdirs(dir, 1, made);

    if (err != 0)
        return err;
    if (chmod(dir, 0700) != 0)
        return -errno;
    if (realpath(dir, abs) == NULL || strlen(abs) >= cap)
        return -errno ? -errno : -ENAMETOOLONG;
    return 0;
}

/* The config file's folder (e.g. /etc/gradmesh), made when missing. */
static int make_config_dir(const char *config, struct gm_cli_made *made)
{
    return gm_cli_mkdirs(config, 0, made);
}

/* The files init and join write into a state directory (a failure removes them again). */
static const char *const written[] = {"ca.key", "ca.crt",     "node.key", "node.crt",
                                      "tokens", "beacon.key", "members",  "admitter"};
#define NWRITTEN (sizeof(written) / sizeof(written[0]))

/*
 * Where init and join write the config.  --config or $GRADMESH_CONFIG when given; otherwise
 * /etc/gradmesh/CLUSTER.conf, the file gradmesh@CLUSTER.service reads (*link = 1: afterwards
 * /etc/gradmesh/gradmesh.conf, the default of every other command, is made a symlink to it
 * unless it exists).
 */
static int config_for(const char *flag, const char *cluster, char out[GM_PATH_MAX], int *link)
{
    const char *env = getenv("GRADMESH_CONFIG");
    int n;

    *link = 0;
    if (flag != NULL || (env != NULL && env[0] != '\0'))
        n = snprintf(out, GM_PATH_MAX, "%s", gm_config_path(flag));
    else {
        n = snprintf(out, GM_PATH_MAX, "%s/%s.conf", GM_CONFIG_DIR, cluster);
        *link = 1;
    }
    return n < 0 || n >= GM_PATH_MAX ? -ENAMETOOLONG : 0;
}

/* What to run next: the systemd unit when the config is where the unit reads it. */
static void print_next(const char *cluster, const char *config, int system_layout)
{
    if (system_layout)
        printf("next: systemctl enable --now gradmesh@%s   (or: gradmesh agent --config %s)\n",
               cluster, config);
    else
        printf("next: gradmesh agent --config %s\n", config);
}

/* /etc/gradmesh/gradmesh.conf -> CLUSTER.conf, unless something is there already. */
static void link_default_config(const char *cluster)
{
    char target[GM_PATH_MAX];
    struct stat st;

    if (lstat(GM_DEFAULT_CONFIG, &st) == 0 || errno != ENOENT)
        return;
    snprintf(target, sizeof(target), "%s.conf", cluster);
    if (symlink(target, GM_DEFAULT_CONFIG) != 0)
        gm_warn("event=config-link file=%s err=%d", GM_DEFAULT_CONFIG, -errno);
}

static int state_file(const struct gm_config *c, const char *name, char *out)
{
    return gm_config_state_path(c, name, out, GM_PATH_MAX);
}

static void random_node_id(char out[GM_ID_NAME_MAX + 1])
{
    uint8_t r[4];
    char hex[9];

    randombytes_buf(r, sizeof(r));
    sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
    snprintf(out, GM_ID_NAME_MAX + 1, "n-%s", hex);
}

static int check_listen(const char *listen)
{
    struct sockaddr_storage ss;

    return gm_proto_addr_parse(listen, &ss);
}

/* The state directory init or join uses: --state DIR, else GM_STATE_ROOT/CLUSTER (written in
 * buf, GM_PATH_MAX bytes; a name too long to fit leaves "" there, which prepare_config refuses). */
static const char *default_state(const char *state, const char *cluster, char *buf)
{
    int n;

    if (state != NULL)
        return state;
    n = snprintf(buf, GM_PATH_MAX, "%s/%s", GM_STATE_ROOT, cluster);
    if (n < 0 || n >= GM_PATH_MAX)
        buf[0] = '\0';
    return buf;
}

/* Writes a fresh config skeleton in *c, and makes the state directory as its owner (*own:
 * the command goes on as that user until owner_restore()). */
/* state == NULL: the system layout, one of each per cluster so that two clusters on one host
 * never share a file (/var/lib/gradmesh/CLUSTER, control socket /run/gradmesh/CLUSTER/
 * control.sock: the StateDirectory and RuntimeDirectory of gradmesh@CLUSTER.service); a
 * --state DIR keeps everything in DIR (control.sock there). */
static int prepare_config(struct gm_config *c, const char *cluster, const char *node,
                          const char *listen, const char *state, const char *multicast,
                          const char *metrics, struct gm_cli_made *made,
                          struct state_owner *own, char *state_buf)
{
    char abs[GM_PATH_MAX];
    int err, n;
    const int system_layout = state == NULL;

    gm_config_defaults(c);
    if (system_layout) {
        n = snprintf(state_buf, GM_PATH_MAX, "%s/%s", GM_STATE_ROOT, cluster);
        if (n < 0 || n >= GM_PATH_MAX)
            return -ENAMETOOLONG;
        state = state_buf;
    } else {
        snprintf(state_buf, GM_PATH_MAX, "%s", state);
    }
    err = owner_become(own, state);
    if (err == 0)
        err = make_state_dir(state, abs, sizeof(abs), made);
    if (err != 0)
        return err;
    snprintf(c->cluster, sizeof(c->cluster), "%s", cluster);
    snprintf(c->node, sizeof(c->node), "%s", node);
    snprintf(c->listen, sizeof(c->listen), "%s", listen);
    snprintf(c->state_dir, sizeof(c->state_dir), "%s", abs);
    if (system_layout)
        n = snprintf(c->control, sizeof(c->control), "%s/%s/control.sock", GM_RUNTIME_DIR, cluster);
    else
        n = snprintf(c->control, sizeof(c->control), "%s/control.sock", abs);
    if (n < 0 || n >= (int)sizeof(c->control))
        return -ENAMETOOLONG;
    c->device.want = GM_DEVICE_WANT_AUTO;
    if (multicast != NULL)
        snprintf(c->multicast, sizeof(c->multicast), "%s",
                 strcmp(multicast, "off") == 0 ? "" : multicast);
    if (metrics != NULL)
        snprintf(c->metrics, sizeof(c->metrics), "%s", strcmp(metrics, "off") == 0 ? "" : metrics);
    return 0;
}

/* --metrics IP:PORT or off: a loopback address (a public one is a deliberate config edit,
 * with metrics_public = yes). */
static int check_metrics(const char *cmd, const char *m)
{
    if (m == NULL || strcmp(m, "off") == 0 || gm_config_addr_is_loopback(m))
        return 0;
    fprintf(stderr,
            "gradmesh %s: --metrics wants a loopback IP:PORT (default %s) or off; to serve "
            "metrics to the network, edit [metrics] in the config afterwards\n",
            cmd, GM_METRICS_DEFAULT);
    return -EINVAL;
}

/* --multicast GROUP:PORT or off. */
static int check_multicast(const char *cmd, const char *m)
{
    struct sockaddr_in g;

    if (m == NULL || strcmp(m, "off") == 0 || gm_disc_parse_group(m, &g) == 0)
        return 0;
    fprintf(stderr, "gradmesh %s: --multicast wants an IPv4 group GROUP:PORT (e.g. %s) or off\n",
            cmd, GM_DISC_GROUP_DEFAULT);
    return -EINVAL;
}

int gm_cli_init(int argc, char **argv)
{
    static const struct option opts[] = {{"cluster", required_argument, NULL, 'c'},
                                         {"config", required_argument, NULL, 'f'},
                                         {"state", required_argument, NULL, 's'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"multicast", required_argument, NULL, 'm'},
                                         {"metrics", required_argument, NULL, 'M'},
                                         {"force", no_argument, NULL, 'F'},
                                         {NULL, 0, NULL, 0}};
    const char *cluster = NULL, *config = NULL, *state = NULL, *listen = GM_DEFAULT_LISTEN,
               *node = NULL, *multicast = NULL, *metrics = NULL;
    char config_buf[GM_PATH_MAX];
    int link = 0, force = 0;
    struct gm_cli_made made = {0};
    uint8_t bkey[GM_BEACON_KEY_LEN];
    char node_buf[GM_ID_NAME_MAX + 1], path[GM_PATH_MAX];
    struct gm_key *cakey = NULL, *key = NULL;
    struct gm_cert *ca = NULL, *cert = NULL;
    uint8_t pub[GM_ID_PUB_LEN];
    struct gm_config c;
    struct state_owner own;
    char state_buf[GM_PATH_MAX];
    int o, err;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            cluster = optarg;
            break;
        case 'f':
            config = optarg;
            break;
        case 's':
            state = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'n':
            node = optarg;
            break;
        case 'm':
            multicast = optarg;
            break;
        case 'M':
            metrics = optarg;
            break;
        case 'F':
            force = 1;
            break;
        default:
            return gm_cli_usage_err("init");
        }
    }
    if (optind != argc || cluster == NULL)
        return gm_cli_usage_err("init");
    if (check_multicast("init", multicast) != 0 || check_metrics("init", metrics) != 0)
        return GM_EXIT_USAGE;
    if (node == NULL) {
        random_node_id(node_buf);
        node = node_buf;
    }
    if (!gm_id_name_valid(cluster) || !gm_id_name_valid(node)) {
        fprintf(stderr, "gradmesh init: names are 1-63 characters of a-z 0-9 . _ -\n");
        return GM_EXIT_USAGE;
    }
    if (config_for(config, cluster, config_buf, &link) != 0)
        return gm_cli_usage_err("init");
    config = config_buf;
    if (check_listen(listen) != 0) {
        fprintf(stderr, "gradmesh init: --listen wants IP:PORT\n");
        return GM_EXIT_USAGE;
    }
    o = gm_cli_state_check("init", config, default_state(state, cluster, state_buf), force);
    if (o != GM_EXIT_OK)
        return o;
    err = prepare_config(&c, cluster, node, listen, state, multicast, metrics, &made, &own,
                         state_buf);
    if (err != 0) {
        gm_cli_undo(&made, NULL, NULL, 0);
        return state_dir_problem("init", state_buf, err);
    }
    /* --force: the identity and cluster state of the node before go (checkpoints stay) */
    err = force ? gm_cli_state_wipe(c.state_dir) : 0;
    if (err == 0)
        err = gm_id_key_generate(&cakey);
    if (err == 0)
        err = gm_id_ca_create(cluster, cakey, GM_ID_CA_DAYS, &ca);
    if (err == 0)
        err = gm_id_key_generate(&key);
    if (err == 0)
        err = gm_id_key_public(key, pub);
    if (err == 0)
        err = gm_id_cert_issue(ca, cakey, cluster, node, pub, GM_ID_NODE_DAYS, &cert);
    if (err == 0 && (err = state_file(&c, "ca.key", path)) == 0)
        err = gm_id_key_save(cakey, path);
    if (err == 0 && (err = state_file(&c, "ca.crt", path)) == 0)
        err = gm_id_cert_save(ca, path);
    if (err == 0 && (err = state_file(&c, "node.key", path)) == 0)
        err = gm_id_key_save(key, path);
    if (err == 0 && (err = state_file(&c, "node.crt", path)) == 0)
        err = gm_id_cert_save(cert, path);
    if (err == 0 && (err = state_file(&c, "tokens", path)) == 0)
        err = gm_id_write_file(path, "", 0, 0600);
    gm_beacon_key_generate(bkey);
    if (err == 0 && (err = state_file(&c, "beacon.key", path)) == 0)
        err = gm_beacon_key_save(path, bkey);
    sodium_memzero(bkey, sizeof(bkey));
    if (err == 0)
        err = owner_restore(&own); /* the config is root's, in /etc/gradmesh */
    if (err == 0)
        err = make_config_dir(config, &made);
    if (err == 0)
        err = gm_config_save(config, &c);
    gm_id_key_free(cakey);
    gm_id_key_free(key);
    gm_id_cert_free(ca);
    gm_id_cert_free(cert);
    if (err != 0) {
        gm_cli_undo(&made, c.state_dir, written, NWRITTEN);
        return gm_cli_fail("init", err, "could not create the cluster");
    }
    if (link)
        link_default_config(cluster);
    gm_notice("event=cluster-created cluster=%s node=%s state=%s config=%s", cluster, node,
              c.state_dir, config);
    printf("cluster %s created; this machine is node %s\n", cluster, node);
    print_next(cluster, config, link);
    return GM_EXIT_OK;
}

/* host:port (name or IP) -> sockaddr and canonical "ip:port". */
static int resolve(const char *hostport, struct sockaddr_storage *ss, char out[GM_ADDR_MAX])
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    size_t n;
    int err;

    if (gm_proto_addr_parse(hostport, ss) == 0)
        return gm_proto_addr_format((struct sockaddr *)ss, out);
    if (colon == NULL || (n = (size_t)(colon - hostport)) == 0 || n >= sizeof(host))
        return -EINVAL;
    memcpy(host, hostport, n);
    host[n] = '\0';
    err = getaddrinfo(host, colon + 1, &hints, &res);
    if (err != 0 || res == NULL)
        return -EHOSTUNREACH;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return gm_proto_addr_format((struct sockaddr *)ss, out);
}

/* Why --peer HOSTPORT cannot be used (resolve()'s err), in words, with what to do. */
static int peer_problem(const char *hostport, int err)
{
    const char *colon = strrchr(hostport, ':');

    if (colon == NULL || colon == hostport || colon[1] == '\0')
        fprintf(stderr,
                "gradmesh join: --peer %s: want HOST:PORT, the admitter's [node] listen "
                "address (e.g. 10.8.0.1:7450)\n",
                hostport);
    else
        fprintf(stderr,
                "gradmesh join: --peer %s: cannot resolve '%.*s': check the name, or give the "
                "admitter's IP address\n",
                hostport, (int)(colon - hostport), hostport);
    return gm_err_exit_code(err == -EHOSTUNREACH ? -EHOSTUNREACH : -EINVAL);
}

/* A refused or failed join (gm_join_run's err and reason), in words, with what to do. */
static void join_explain(int err, const char *reason, const char *peer, const char *node)
{
    switch (err) {
    case -ECONNREFUSED:
        fprintf(stderr,
                "gradmesh join: nothing accepts connections at %s: is the admitter's agent "
                "running (gradmesh agent), and is %s its [node] listen address?\n",
                peer, peer);
        return;
    case -ETIMEDOUT:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
        fprintf(stderr,
                "gradmesh join: %s does not answer (%s): check the address, the route and any "
                "firewall between here and there\n",
                peer, gm_strerror(err));
        return;
    case -EEXIST:
        fprintf(stderr,
                "gradmesh join: the cluster already has a node named %s: choose another name "
                "with --node NAME (or leave --node out for a random one)\n",
                node);
        return;
    case GM_ERR_TOKEN:
        fprintf(stderr,
                "gradmesh join: the admitter refused the invite token (%s): make a new one with "
                "`gradmesh token create` on a voter\n",
                reason[0] ? reason : "bad, expired, revoked or used");
        return;
    default:
        fprintf(stderr, "gradmesh join: %s: %s\n", gm_strerror(err), reason);
    }
}

/* The members file of a new node.  The admitter lists itself first with its
 * listen address, which may be a wildcard: the address we reached it at
 * (admitter_addr) fills in the host. */
static int save_members(const struct gm_config *c, const struct gm_member *m, size_t n,
                        const char *admitter_addr)
{
    char path[GM_PATH_MAX];
    struct gm_member *keep = calloc(n + 1, sizeof(*keep));
    size_t i, k = 0;
    int err;

    if (keep == NULL)
        return -ENOMEM;
    for (i = 0; i < n; i++) {
        if (strcmp(m[i].node, c->node) == 0)
            continue;
        keep[k] = m[i];
        if (i == 0)
            gm_proto_addr_fill_host(m[i].address, admitter_addr, keep[k].address);
        k++;
    }
    err = state_file(c, "members", path);
    if (err == 0)
        err = gm_members_write(path, keep, k);
    free(keep);
    return err;
}

/* No --peer: an admitter of the token's cluster, found by its JOIN beacon. */
static int find_admitter(const struct gm_token *tok, const char *multicast, int wait_s,
                         struct sockaddr_storage *ss, char peer_addr[GM_ADDR_MAX])
{
    uint8_t v[GM_TOKEN_VERIFIER_LEN], jkey[GM_BEACON_KEY_LEN];
    char addr[GM_DISC_ADDR_MAX], node[GM_ID_NAME_MAX + 1];
    int err;

    fprintf(stderr,
            "gradmesh join: looking for an admitter of cluster %s on the LAN (%s, up to %d s)...\n",
            gm_token_cluster(tok), multicast, wait_s);
    gm_token_verifier(tok, v);
    gm_beacon_join_key(v, jkey);
    sodium_memzero(v, sizeof(v));
    err = gm_disc_find_admitter(multicast, NULL, gm_token_cluster(tok), jkey, wait_s * 1000, addr,
                                node);
    sodium_memzero(jkey, sizeof(jkey));
    if (err == -ENETDOWN) {
        fprintf(stderr, "gradmesh join: no multicast-capable interface is up here; "
                        "give the admitter with --peer HOST:PORT\n");
        return err;
    }
    if (err == -ETIMEDOUT) {
        fprintf(stderr,
                "gradmesh join: no admitter of cluster %s answered within %d s: is its "
                "agent running, on this LAN, with this token still valid? Through a VPN "
                "or router give --peer HOST:PORT\n",
                gm_token_cluster(tok), wait_s);
        return err;
    }
    if (err == 0 && gm_proto_addr_parse(addr, ss) != 0)
        err = -EINVAL;
    if (err != 0) {
        fprintf(stderr, "gradmesh join: multicast search failed: %s\n", gm_strerror(err));
        return err;
    }
    snprintf(peer_addr, GM_ADDR_MAX, "%s", addr);
    fprintf(stderr, "gradmesh join: found admitter %s at %s\n", node, addr);
    return 0;
}

/* "admitter: join refused: already used" -> "already used": the reason without its
 * prefixes, for a sentence that says who refused. */
static const char *strip_admitter(const char *reason)
{
    const char *p = strstr(reason, "join refused: ");

    return p != NULL ? p + strlen("join refused: ") : reason;
}

int gm_cli_join(int argc, char **argv)
{
    static const struct option opts[] = {
        {"peer", required_argument, NULL, 'p'},  {"config", required_argument, NULL, 'f'},
        {"state", required_argument, NULL, 's'}, {"listen", required_argument, NULL, 'l'},
        {"node", required_argument, NULL, 'n'},  {"multicast", required_argument, NULL, 'm'},
        {"wait", required_argument, NULL, 'w'},  {"metrics", required_argument, NULL, 'M'},
        {"force", no_argument, NULL, 'F'},       {NULL, 0, NULL, 0}};
    const char *peer = NULL, *config = NULL, *state = NULL, *listen = GM_DEFAULT_LISTEN,
               *node = NULL, *multicast = NULL, *metrics = NULL;
    char config_buf[GM_PATH_MAX];
    int link = 0, force = 0;
    struct gm_cli_made made = {0};
    char node_buf[GM_ID_NAME_MAX + 1], path[GM_PATH_MAX], peer_addr[GM_ADDR_MAX];
    struct sockaddr_storage ss;
    struct gm_token *tok = NULL;
    struct gm_key *key = NULL;
    struct gm_join_params p = {0};
    struct gm_join_result r;
    struct gm_config c;
    struct state_owner own = {0};
    char state_buf[GM_PATH_MAX] = "";
    char id[2 * GM_TOKEN_ID_LEN + 1];
    int o, err, wait_s = FIND_WAIT_S;

    memset(&r, 0, sizeof(r));
    gm_cli_quiet_log();
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'p':
            peer = optarg;
            break;
        case 'f':
            config = optarg;
            break;
        case 's':
            state = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'n':
            node = optarg;
            break;
        case 'm':
            multicast = optarg;
            break;
        case 'M':
            metrics = optarg;
            break;
        case 'F':
            force = 1;
            break;
        case 'w': {
            char *end = NULL;
            long w = strtol(optarg, &end, 10);
            if (*end != '\0' || w < 1 || w > 3600)
                return gm_cli_usage_err("join");
            wait_s = (int)w;
            break;
        }
        default:
            return gm_cli_usage_err("join");
        }
    }
    if (optind != argc - 1)
        return gm_cli_usage_err("join");
    if (check_multicast("join", multicast) != 0 || check_metrics("join", metrics) != 0)
        return GM_EXIT_USAGE;
    if (peer == NULL && multicast != NULL && strcmp(multicast, "off") == 0) {
        fprintf(stderr, "gradmesh join: with --multicast off, give the admitter with --peer "
                        "HOST:PORT\n");
        return GM_EXIT_USAGE;
    }
    err = gm_token_parse(argv[optind], strlen(argv[optind]), &tok);
    sodium_memzero(argv[optind], strlen(argv[optind])); /* out of /proc/PID/cmdline */
    if (err != 0) {
        fprintf(stderr, "gradmesh join: the token is malformed (copy it again)\n");
        return GM_EXIT_CONFIG;
    }
    gm_token_id_hex(gm_token_id(tok), id);
    if (node == NULL) {
        random_node_id(node_buf);
        node = node_buf;
    }
    if (!gm_id_name_valid(node) || check_listen(listen) != 0) {
        gm_token_free(tok);
        return gm_cli_usage_err("join");
    }
    if (strcmp(strrchr(listen, ':'), ":0") == 0) {
        /* members dial the address given here: it needs a real port */
        fprintf(stderr, "gradmesh join: --listen needs a port other than 0\n");
        gm_token_free(tok);
        return GM_EXIT_USAGE;
    }
    /* what is there already, before anything goes out on the network */
    if (config_for(config, gm_token_cluster(tok), config_buf, &link) != 0) {
        gm_token_free(tok);
        return gm_cli_usage_err("join");
    }
    config = config_buf;
    o = gm_cli_state_check("join", config, default_state(state, gm_token_cluster(tok), state_buf),
                           force);
    if (o != GM_EXIT_OK) {
        gm_token_free(tok);
        return o;
    }
    if (peer != NULL)
        err = resolve(peer, &ss, peer_addr);
    else
        err = find_admitter(tok, multicast ? multicast : GM_DISC_GROUP_DEFAULT, wait_s, &ss,
                            peer_addr);
    if (err != 0) {
        gm_token_free(tok);
        return peer != NULL ? peer_problem(peer, err) : GM_EXIT_RUNTIME;
    }
    err = prepare_config(&c, gm_token_cluster(tok), node, listen, state, multicast, metrics, &made,
                         &own, state_buf);
    if (err == 0)
        err = gm_id_key_generate(&key);
    if (err != 0) {
        gm_token_free(tok);
        gm_cli_undo(&made, NULL, NULL, 0);
        return state_dir_problem("join", state_buf, err);
    }
    if (peer != NULL) /* through a VPN or WAN: the agent keeps dialing it (static endpoint) */
        snprintf(c.peers, sizeof(c.peers), "%s", peer);
    p.token = tok;
    p.peer = (struct sockaddr *)&ss;
    p.node = node;
    p.listen = listen;
    p.key = key;
    gm_info("event=join-start cluster=%s token=%s peer=%s node=%s", gm_token_cluster(tok), id,
            peer_addr, node);
    err = gm_join_run(&p, &r);
    gm_token_free(tok);
    if (err != 0) {
        /* the log line for logs and scripts; a person reads the line after it (on a
         * terminal only that one: gm_cli_quiet_log) */
        gm_notice("event=join-refused token=%s peer=%s err=%d reason=\"%s\"", id, peer_addr, err,
                  r.reason);
        join_explain(err, strip_admitter(r.reason), peer_addr, node);
        gm_id_key_free(key);
        gm_join_result_free(&r);
        gm_cli_undo(&made, NULL, NULL, 0); /* nothing was written: only folders made */
        return gm_err_exit_code(err);
    }
    /* --force: the identity and cluster state of the node before go (checkpoints stay) */
    err = force ? gm_cli_state_wipe(c.state_dir) : 0;
    if (err == 0 && (err = state_file(&c, "node.key", path)) == 0)
        err = gm_id_key_save(key, path);
    if (err == 0 && (err = state_file(&c, "node.crt", path)) == 0)
        err = gm_id_cert_save(r.cert, path);
    if (err == 0 && (err = state_file(&c, "ca.crt", path)) == 0)
        err = gm_id_cert_save(r.ca, path);
    if (err == 0 && (err = state_file(&c, "beacon.key", path)) == 0)
        err = gm_beacon_key_save(path, r.beacon_key);
    if (err == 0)
        err = save_members(&c, r.members, r.n_members, peer_addr);
    if (err == 0 && r.n_members > 0 && (err = state_file(&c, "admitter", path)) == 0) {
        /* the admitter lists itself first: it renews our certificate later */
        char line[GM_ID_NAME_MAX + 2];
        snprintf(line, sizeof(line), "%s\n", r.members[0].node);
        err = gm_id_write_file(path, line, strlen(line), 0644);
    }
    if (err == 0)
        err = owner_restore(&own); /* the config is root's, in /etc/gradmesh */
    if (err == 0)
        err = make_config_dir(config, &made);
    if (err == 0)
        err = gm_config_save(config, &c);
    gm_id_key_free(key);
    gm_join_result_free(&r);
    if (err != 0) {
        gm_cli_undo(&made, c.state_dir, written, NWRITTEN);
        return gm_cli_fail("join", err, "could not save the new identity");
    }
    if (link)
        link_default_config(c.cluster);
    gm_notice("event=joined cluster=%s node=%s token=%s", c.cluster, node, id);
    printf("joined cluster %s as node %s\n", c.cluster, node);
    print_next(c.cluster, config, link);
    return GM_EXIT_OK;
}

static int parse_ttl(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    int64_t mul = 1;

    if (end == s || v <= 0)
        return -EINVAL;
    if (*end == 'm')
        mul = 60;
    else if (*end == 'h')
        mul = 3600;
    else if (*end == 'd')
        mul = 86400;
    else if (*end != 's' && *end != '\0')
        return -EINVAL;
    if (*end != '\0' && end[1] != '\0')
        return -EINVAL;
    if (v > 366LL * 86400 / mul)
        return -EINVAL;
    *out = (int64_t)v * mul;
    return 0;
}

int gm_cli_token(int argc, char **argv)
{
    static const struct option opts[] = {{"ttl", required_argument, NULL, 't'},
                                         {"uses", required_argument, NULL, 'u'},
                                         {"config", required_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL, *sub;
    int64_t ttl = GM_TOKEN_DEFAULT_TTL_S;
    long uses = 1;
    int o, err, as_json = 0;
    json_t *r = NULL;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            if (parse_ttl(optarg, &ttl) != 0)
                return gm_cli_usage_err("token");
            break;
        case 'u': {
            char *end = NULL;
            uses = strtol(optarg, &end, 10);
            if (*end != '\0' || uses < 1 || uses > 10000)
                return gm_cli_usage_err("token");
            break;
        }
        case 'f':
            config = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        default:
            return gm_cli_usage_err("token");
        }
    }
    if (optind >= argc)
        return gm_cli_usage_err("token");
    sub = argv[optind];
    if (strcmp(sub, "create") == 0 && optind == argc - 1) {
        err = gm_cli_control("token create", config,
                             json_pack("{s:s, s:I, s:I}", "cmd", "token-create", "ttl",
                                       (json_int_t)ttl, "uses", (json_int_t)uses),
                             &r);
        if (err != 0)
            return gm_err_exit_code(err);
        printf("%s\n", json_string_value(json_object_get(r, "token")));
        fflush(stdout);
        /* wipe our copy of the secret */
        {
            json_t *t = json_object_get(r, "token");
            if (json_is_string(t))
                sodium_memzero((char *)json_string_value(t), json_string_length(t));
        }
        json_decref(r);
        return GM_EXIT_OK;
    }
    if (strcmp(sub, "list") == 0 && optind == argc - 1) {
        size_t i;
        json_t *e;
        err = gm_cli_control("token list", config, json_pack("{s:s}", "cmd", "token-list"), &r);
        if (err != 0)
            return gm_err_exit_code(err);
        if (as_json) {
            char *s = json_dumps(r, JSON_COMPACT | GM_JSON_HUMAN);
            printf("%s\n", s ? s : "{}");
            free(s);
        } else {
            int64_t now = (int64_t)time(NULL);
            printf("%-16s  %-8s  %-9s  %s\n", "ID", "USES", "EXPIRES", "STATE");
            json_array_foreach(json_object_get(r, "tokens"), i, e)
            {
                int64_t exp = (int64_t)json_integer_value(json_object_get(e, "expires"));
                int left = (int)json_integer_value(json_object_get(e, "uses_left"));
                const char *st = json_is_true(json_object_get(e, "revoked")) ? "revoked"
                                 : exp <= now                                ? "expired"
                                 : left <= 0                                 ? "used"
                                                                             : "valid";
                char in[16];
                printf("%-16s  %3d/%-4d  %9s  %s\n", json_string_value(json_object_get(e, "id")),
                       left, (int)json_integer_value(json_object_get(e, "uses")),
                       gm_cli_fmt_duration(exp > now ? (double)(exp - now) : 0, in, sizeof(in)),
                       st);
            }
        }
        json_decref(r);
        return GM_EXIT_OK;
    }
    if (strcmp(sub, "revoke") == 0 && optind == argc - 2) {
        err = gm_cli_control("token revoke", config,
                             json_pack("{s:s, s:s}", "cmd", "token-revoke", "id", argv[optind + 1]),
                             &r);
        if (err != 0)
            return gm_err_exit_code(err);
        json_decref(r);
        printf("token %s revoked\n", argv[optind + 1]);
        return GM_EXIT_OK;
    }
    return gm_cli_usage_err("token");
}

int gm_cli_agent(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL;
    struct gm_agent *a = NULL;
    int o, err;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'f')
            config = optarg;
        else
            return gm_cli_usage_err("agent");
    }
    if (optind != argc)
        return gm_cli_usage_err("agent");
    err = gm_agent_open(gm_config_path(config), &a);
    if (err == GM_ERR_CONFIG)
        return GM_EXIT_CONFIG; /* the one line naming file, line and problem is out */
    if (err == -EACCES)
        return GM_EXIT_NOPERM; /* the line naming the file and its owner is out */
    if (err != 0)
        return gm_cli_fail("agent", err, "cannot start");
    err = gm_agent_start(a);
    if (err != 0) {
        gm_agent_free(a);
        return gm_cli_fail("agent", err, "cannot start");
    }
    while (uv_run(gm_agent_loop(a), UV_RUN_DEFAULT) != 0)
        ;
    gm_agent_free(a);
    gm_notice("event=agent-stopped");
    return GM_EXIT_OK;
}

int gm_cli_status(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL;
    json_t *r = NULL, *m;
    size_t i;
    int o, err, as_json = 0;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'f')
            config = optarg;
        else if (o == 'j')
            as_json = 1;
        else
            return gm_cli_usage_err("status");
    }
    if (optind != argc)
        return gm_cli_usage_err("status");
    err = gm_cli_control("status", config, json_pack("{s:s}", "cmd", "status"), &r);
    if (err != 0)
        return gm_err_exit_code(err);
    if (as_json) {
        char *s = json_dumps(r, JSON_COMPACT | GM_JSON_HUMAN);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("cluster %s  node %s  role %s  listen %s  quorum %s\n",
               json_string_value(json_object_get(r, "cluster")),
               json_string_value(json_object_get(r, "node")),
               json_string_value(json_object_get(r, "role")),
               json_string_value(json_object_get(r, "listen")),
               json_is_true(json_object_get(r, "quorum")) ? "yes" : "no");
        printf("version %s  peer protocol %lld\n", json_string_value(json_object_get(r, "version")),
               (long long)json_integer_value(json_object_get(r, "proto")));
        if (json_is_true(json_object_get(r, "mixed_versions")))
            printf("mixed versions: members run other builds than this node (%s): see VERSION "
                   "below; upgrade them to one version\n",
                   json_string_value(json_object_get(r, "version")));
        if (json_is_string(json_object_get(r, "chief")))
            printf("chief %s  term %lld\n", json_string_value(json_object_get(r, "chief")),
                   (long long)json_integer_value(json_object_get(r, "term")));
        else
            printf("no chief: %s\n", json_string_value(json_object_get(r, "chief_reason")));
        json_t *job = json_object_get(r, "job");
        if (json_is_object(job)) {
            printf("job %s %s: %s, step %lld/%lld, world %lld\n",
                   json_string_value(json_object_get(job, "id")),
                   json_string_value(json_object_get(job, "name")),
                   json_string_value(json_object_get(job, "state")),
                   (long long)json_integer_value(json_object_get(job, "step")),
                   (long long)json_integer_value(json_object_get(job, "total_steps")),
                   (long long)json_integer_value(json_object_get(job, "world")));
            if (json_is_string(json_object_get(job, "paused_reason")))
                printf("job paused: %s\n",
                       json_string_value(json_object_get(job, "paused_reason")));
            else if (json_is_string(json_object_get(job, "error")))
                printf("job %s: %s\n", json_string_value(json_object_get(job, "state")),
                       json_string_value(json_object_get(job, "error")));
        }
        json_t *disk = json_object_get(r, "disk");
        const char *dpeer = json_string_value(json_object_get(disk, "peer"));
        const char *me = json_string_value(json_object_get(r, "node"));
        if (json_is_true(json_object_get(disk, "full")) && dpeer != NULL && me != NULL &&
            strcmp(dpeer, me) == 0)
            printf("disk full: %s: %s (this node's checkpoint of step %lld was not written; "
                   "the one before stays the newest)\n",
                   json_string_value(json_object_get(disk, "path")),
                   json_string_value(json_object_get(disk, "error")),
                   (long long)json_integer_value(json_object_get(disk, "step")));
        else if (json_is_true(json_object_get(disk, "full")))
            printf("disk full: %s: %s (a checkpoint replica from %s, step %lld, was not stored: "
                   "this node holds no copy of it)\n",
                   json_string_value(json_object_get(disk, "path")),
                   json_string_value(json_object_get(disk, "error")), dpeer != NULL ? dpeer : "?",
                   (long long)json_integer_value(json_object_get(disk, "step")));
        printf("%-24s %-24s %-6s %-5s %-8s %s\n", "MEMBER", "ADDRESS", "LINK", "STATE", "RTT_MS",
               "VERSION");
        json_array_foreach(json_object_get(r, "members"), i, m)
        {
            json_t *rtt = json_object_get(m, "rtt_ms");
            const char *ver = json_string_value(json_object_get(m, "version"));
            char rs[32] = "-";
            if (json_is_number(rtt))
                snprintf(rs, sizeof(rs), "%.3f", json_number_value(rtt));
            printf("%-24s %-24s %-6s %-5s %-8s %s\n", json_string_value(json_object_get(m, "node")),
                   json_string_value(json_object_get(m, "address")),
                   json_string_value(json_object_get(m, "link")),
                   json_string_value(json_object_get(m, "state")), rs, ver != NULL ? ver : "-");
        }
    }
    json_decref(r);
    return GM_EXIT_OK;
}

/* agent/config.c - see config.h.  Parsed with inih, written with stdio. */
#include "agent/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "common/log.h"
#include "discovery/discovery.h"

struct parse_state {
    struct gm_config *c;
    const char *path;
    int bad;
};

static int copy(char *dst, size_t cap, const char *v)
{
    size_t n = strlen(v);

    if (n >= cap)
        return -1;
    memcpy(dst, v, n + 1);
    return 0;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *ps = user;
    struct gm_config *c = ps->c;
    int r = 0;

#define IS(s, n) (strcmp(section, s) == 0 && strcmp(name, n) == 0)
    if (IS("cluster", "name"))
        r = copy(c->cluster, sizeof(c->cluster), value);
    else if (IS("node", "id"))
        r = copy(c->node, sizeof(c->node), value);
    else if (IS("node", "listen"))
        r = copy(c->listen, sizeof(c->listen), value);
    else if (IS("node", "state_dir"))
        r = copy(c->state_dir, sizeof(c->state_dir), value);
    else if (IS("node", "control"))
        r = copy(c->control, sizeof(c->control), value);
    else if (IS("discovery", "peers"))
        r = copy(c->peers, sizeof(c->peers), value);
    else if (IS("discovery", "multicast")) {
        struct sockaddr_in g;
        if (strcmp(value, "off") == 0)
            c->multicast[0] = '\0';
        else
            r = gm_disc_parse_group(value, &g) != 0
                    ? -1
                    : copy(c->multicast, sizeof(c->multicast), value);
    } else if (IS("discovery", "tunnels"))
        r = copy(c->tunnels, sizeof(c->tunnels), value);
    else if (IS("discovery", "interfaces"))
        r = copy(c->interfaces, sizeof(c->interfaces), value);
    else if (IS("discovery", "measure")) {
        r = strcmp(value, "yes") == 0 ? 0 : strcmp(value, "no") == 0 ? 0 : -1;
        c->measure = strcmp(value, "yes") == 0;
    } else if (IS("train", "device"))
        r = copy(c->device, sizeof(c->device), value);
    else if (IS("train", "threads")) {
        char *end = NULL;
        long v = strtol(value, &end, 10);
        r = (*value == '\0' || *end != '\0' || v < 0 || v > 4096) ? -1 : 0;
        c->threads = (int)v;
    } else if (IS("metrics", "listen"))
        r = copy(c->metrics, sizeof(c->metrics), value);
    else {
        gm_warn("event=config-unknown-key file=%s section=%s key=%s", ps->path, section, name);
        return 1;
    }
#undef IS
    if (r != 0) {
        gm_err("event=config-bad-value file=%s section=%s key=%s", ps->path, section, name);
        ps->bad = 1;
    }
    return 1;
}

void gm_config_defaults(struct gm_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->device, sizeof(c->device), "auto");
    snprintf(c->multicast, sizeof(c->multicast), "%s", GM_DISC_GROUP_DEFAULT);
    c->measure = 1;
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

int gm_config_load(const char *path, struct gm_config *c)
{
    struct parse_state ps = {.c = c, .path = path};
    struct sockaddr_storage ss;
    int r;

    gm_config_defaults(c);
    r = ini_parse(path, handler, &ps);
    if (r < 0) {
        gm_err("event=config-unreadable file=%s", path);
        return GM_ERR_CONFIG;
    }
    if (r > 0) {
        gm_err("event=config-syntax file=%s line=%d", path, r);
        return GM_ERR_CONFIG;
    }
    if (ps.bad)
        return GM_ERR_CONFIG;
    if (!gm_id_name_valid(c->cluster) || !gm_id_name_valid(c->node)) {
        gm_err("event=config-bad-value file=%s key=cluster.name/node.id", path);
        return GM_ERR_CONFIG;
    }
    if (gm_proto_addr_parse(c->listen, &ss) != 0) {
        gm_err("event=config-bad-value file=%s key=node.listen value=%s", path, c->listen);
        return GM_ERR_CONFIG;
    }
    if (c->state_dir[0] != '/') {
        gm_err("event=config-bad-value file=%s key=node.state_dir reason=\"must be absolute\"",
               path);
        return GM_ERR_CONFIG;
    }
    if (c->control[0] == '\0' && snprintf(c->control, sizeof(c->control), "%s/control.sock",
                                          c->state_dir) >= (int)sizeof(c->control))
        return GM_ERR_CONFIG;
    return 0;
}

int gm_config_save(const char *path, const struct gm_config *c)
{
    char buf[8192];
    int n;

    n = snprintf(buf, sizeof(buf),
                 "# gradmesh agent configuration (written by gradmesh init/join)\n"
                 "[cluster]\nname = %s\n\n"
                 "[node]\nid = %s\nlisten = %s\nstate_dir = %s\ncontrol = %s\n\n"
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
                 "[metrics]\nlisten = %s\n",
                 c->cluster, c->node, c->listen, c->state_dir, c->control,
                 c->multicast[0] ? c->multicast : "off", c->peers, c->tunnels, c->interfaces,
                 c->measure ? "yes" : "no", c->device[0] ? c->device : "auto", c->threads,
                 c->metrics);
    if (n < 0 || n >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    return gm_id_write_file(path, buf, (size_t)n, 0644);
}

int gm_config_state_path(const struct gm_config *c, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", c->state_dir, name);

    return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

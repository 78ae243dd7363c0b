/*
 * agent/service/config.h - the agent's INI configuration file (written by `init` and
 * `join`, read by every other command).
 *
 *   [cluster]  name
 *   [node]     id, listen (ip:port), state_dir, control (unix socket path),
 *              peer_timeout (seconds, 5..3600, default 60): a member that sends nothing
 *              (not even a PONG) for this long is dropped, and a running job
 *              re-forms without it.  Control frames go ahead of bulk tensors, so a ping
 *              waits behind at most about 1.3 MiB of a link's data plus the socket
 *              buffers: seconds at 5 Mbit/s, hence the generous default for slow tunnels.
 *              It is the upper bound of each link's measured silence deadline
 *              (agent/mesh/measure.h: 2 s on a LAN), which drops a silent member sooner;
 *              max_tunnel_mbit (whole Mbit/s, 0..100000, default 0 = no cap): the bulk
 *              frames (training, checkpoints, probes) each link of class tunnel sends are
 *              capped at this rate (agent/net/link.h gm_link_set_rate), so training leaves
 *              room on a shared tunnel; codec = auto sees the capped link
 *   [discovery] multicast (group ip:port, default 239.192.74.50:7451, or "off"),
 *              peers (comma-separated host:port static endpoints, dialed with
 *              backoff until linked), tunnels (interface names to class as
 *              tunnels besides tun/tap/WireGuard/ppp), interfaces (beacons only
 *              on these; empty = every suitable one), measure (yes|no: probe
 *              each new link's throughput)
 *   [train]    device (auto|cpu|cuda|cuda:N|cuda:all: train/nn/device.h), threads (0 = all
 *              cores)
 *   [metrics]  listen (ip:port of the Prometheus endpoint, default GM_METRICS_DEFAULT; "off"
 *              = none), metrics_public
 *              (yes|no, default no: listen must be loopback unless yes)
 *
 * Strict, like the job file (a typo must not quietly run something else; systemd does not
 * restart on the exit code 78 it leads to): unknown sections and keys (with the nearest known
 * key as a hint), duplicate keys, keys outside a section and bad values are errors, each one
 * line "FILE:LINE: problem".  Every key is in gradmesh.conf(5).
 *
 * The state directory holds node.key (0600), node.crt, ca.crt, and on the
 * admitter (the machine that ran init) ca.key (0600) and tokens (0600);
 * members and denylist (serials, one a line) everywhere.
 */
#ifndef GM_AGENT_SERVICE_CONFIG_H
#define GM_AGENT_SERVICE_CONFIG_H

#include <stddef.h>

#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/identity.h"
#include "train/nn/device.h"

#define GM_PATH_MAX 1024
#define GM_DEFAULT_LISTEN "0.0.0.0:7450"
/* init and join without --state: GM_STATE_ROOT/CLUSTER (gradmesh@CLUSTER's StateDirectory) */
#define GM_STATE_ROOT "/var/lib/gradmesh"
#define GM_CONFIG_DIR "/etc/gradmesh"
#define GM_DEFAULT_CONFIG GM_CONFIG_DIR "/gradmesh.conf"
/* init and join without --state: the control socket is GM_RUNTIME_DIR/CLUSTER/control.sock
 * (gradmesh@CLUSTER's RuntimeDirectory, its own: one instance stopping removes no other's) */
#define GM_RUNTIME_DIR "/run/gradmesh"
#define GM_DEFAULT_PEER_TIMEOUT_S 60
/* the Prometheus endpoint when [metrics] listen is absent or empty; "off" disables it */
#define GM_METRICS_DEFAULT "127.0.0.1:9464"

struct gm_config {
    char cluster[GM_ID_NAME_MAX + 1];
    char node[GM_ID_NAME_MAX + 1];
    char listen[GM_ADDR_MAX];
    char state_dir[GM_PATH_MAX];
    char control[GM_PATH_MAX];
    char peers[1024];
    char multicast[GM_ADDR_MAX]; /* "" = off */
    char tunnels[256];
    char interfaces[256]; /* beacons only on these; "" = every suitable one */
    int measure;
    struct gm_device_spec device;
    int threads;
    char metrics[GM_ADDR_MAX]; /* "" = off */
    int metrics_public;        /* 1: metrics may listen on a non-loopback address */
    int peer_timeout_s;
    int max_tunnel_mbit; /* 0: no cap */
};

/* Everything off or empty but device "auto", multicast on the default group, measure yes. */
void gm_config_defaults(struct gm_config *c);
/* --config, else $GRADMESH_CONFIG, else /etc/gradmesh/gradmesh.conf. */
const char *gm_config_path(const char *flag);
/* GM_ERR_CONFIG on a bad or unreadable file, with one log line: for a missing or unreadable
 * file a sentence saying what to do (init, join, --config), else "FILE:LINE: problem". */
GM_MUST_CHECK int gm_config_load(const char *path, struct gm_config *c);
/* The same checks on len bytes of text (need not be NUL-terminated); origin names it. */
GM_MUST_CHECK int gm_config_parse(const char *text, size_t len, const char *origin,
                                  struct gm_config *c);
/* 1 when the ip:port is 127.0.0.0/8, ::1 or ::ffff:127.x; 0 otherwise or when unparsable. */
int gm_config_addr_is_loopback(const char *addr);
GM_MUST_CHECK int gm_config_save(const char *path, const struct gm_config *c);
/* dir/name into out; -ENAMETOOLONG. */
GM_MUST_CHECK int gm_config_state_path(const struct gm_config *c, const char *name, char *out,
                                       size_t cap);
/* The state directory and what is directly in it can be used by this process (the folders
 * read and written, the files read): 0, or -EACCES after one line that names the first that
 * cannot, its owner and mode, and the chown that fixes it (a permission problem, not a
 * configuration error: the agent exits GM_EXIT_NOPERM and systemd retries).  A missing
 * directory is 0 (the identity's loader reports it). */
GM_MUST_CHECK int gm_config_check_state(const struct gm_config *c);

#endif

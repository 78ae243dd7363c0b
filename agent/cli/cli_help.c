/*
 * agent/cli/cli_help.c - the text of `gradmesh --help` and `gradmesh VERB --help`.
 *
 * One table, one entry per verb: the synopsis and the option lines.  The man page
 * gradmesh(1) has a section per verb with the same options; tests/integration/help_man.sh
 * checks that the two name the same options and that every option named here is one the
 * verb's parser accepts.  Called from main() only.
 */
#include <stdio.h>
#include <string.h>

#include "agent/cli/cli.h"

struct verb_help {
    const char *verb;
    const char *synopsis; /* after "gradmesh VERB " */
    const char *summary;  /* one line, for `gradmesh --help` */
    const char *text;     /* options and notes, each line indented two spaces */
};

#define CONFIG_LINE                                                                                \
    "  --config FILE          the agent's config (default: $GRADMESH_CONFIG, then\n"               \
    "                         /etc/gradmesh/gradmesh.conf)\n"

static const struct verb_help verbs[] = {
    {"init",
     "--cluster NAME [--config FILE] [--state DIR] [--listen HOST:PORT] [--node ID]\n"
     "                     [--multicast GROUP:PORT|off] [--metrics HOST:PORT|off] [--force]",
     "make a new cluster: its CA and this machine as the first node (the admitter)",
     "  --cluster NAME         the cluster's name (1-63 of a-z 0-9 . _ -)\n" CONFIG_LINE
     "                         without --config, the file is /etc/gradmesh/NAME.conf and\n"
     "                         /etc/gradmesh/gradmesh.conf links to it if absent\n"
     "  --state DIR            identity and members (default /var/lib/gradmesh/NAME, 0700)\n"
     "  --listen HOST:PORT     where members connect (default 0.0.0.0:7450)\n"
     "  --node ID              this node's id (default: random)\n"
     "  --multicast GROUP:PORT|off  LAN beacons (default 239.192.74.50:7451)\n"
     "  --metrics HOST:PORT|off  the Prometheus endpoint, on loopback (default\n"
     "                         127.0.0.1:9464; one port per agent on a host)\n"
     "  --force                replace an existing config file and node identity (its\n"
     "                         checkpoints are kept); never those of a running agent\n"},
    {"join",
     "TOKEN [--peer HOST:PORT] [--config FILE] [--state DIR] [--listen HOST:PORT]\n"
     "                     [--node ID] [--multicast GROUP:PORT|off] [--wait SECONDS]\n"
     "                     [--metrics HOST:PORT|off] [--force]",
     "join a cluster with an invite token from `gradmesh token create`",
     "  TOKEN                  gmtoken1_...; on a LAN it alone finds the admitter\n"
     "  --peer HOST:PORT       the admitter's address (through a VPN or a WAN)\n" CONFIG_LINE
     "                         without --config, as for init: /etc/gradmesh/CLUSTER.conf\n"
     "  --state DIR            identity and members (default /var/lib/gradmesh/CLUSTER)\n"
     "  --listen HOST:PORT     where members connect (default 0.0.0.0:7450; not port 0)\n"
     "  --node ID              this node's id (default: random)\n"
     "  --multicast GROUP:PORT|off  LAN beacons (default 239.192.74.50:7451)\n"
     "  --wait SECONDS         how long to look for the admitter by multicast (1-3600, 15)\n"
     "  --metrics HOST:PORT|off  the Prometheus endpoint, on loopback (default\n"
     "                         127.0.0.1:9464; one port per agent on a host)\n"
     "  --force                replace an existing config file and node identity (its\n"
     "                         checkpoints are kept); never those of a running agent.\n"
     "                         A join that fails removes what it created.\n"},
    {"leave", "[--wait SECONDS] [--config FILE]",
     "leave the cluster: the chief revokes this node, then its identity is removed",
     "  --wait SECONDS         how long to wait for the chief to revoke this node (1-3600,\n"
     "                         10)\n" CONFIG_LINE
     "  This node's agent must run (it tells the chief); it is stopped, then the node's\n"
     "  identity, cluster state and config file are removed.  Checkpoints and job\n"
     "  outputs stay in the state directory (the path is printed).  Refused on the chief:\n"
     "  stop its agent (it hands leadership to another voter), start it again, then leave.\n"},
    {"agent", "[--config FILE]", "run the daemon (systemd runs this as gradmesh@CLUSTER)",
     CONFIG_LINE "  Under systemd it reports READY=1, STATUS=, WATCHDOG=1 and STOPPING=1;\n"
                 "  SIGTERM or SIGINT stop it (SIGTERM on the chief first finishes the step\n"
                 "  and hands leadership to a voter).  Exit 78: bad configuration.\n"},
    {"token", "create [--ttl DURATION] [--uses N] | list [--json] | revoke ID  [--config FILE]",
     "make, list and revoke invite tokens (on the init node or any voter)",
     "  create                 print a new token (secret: hand it over privately)\n"
     "  --ttl DURATION         lifetime: N, Ns, Nm, Nh or Nd, at most 366d (default 24h)\n"
     "  --uses N               how many joins it admits (1-10000, default 1)\n"
     "  list                   id, uses left, time to expiry (24h, 1h30m), state\n"
     "  --json                 list as JSON\n"
     "  revoke ID              refuse the token from now on\n" CONFIG_LINE},
    {"status", "[--json] [--config FILE]", "cluster, node, role and members of the local agent",
     "  --json                 one JSON object (see gradmesh(1), \"status\")\n" CONFIG_LINE},
    {"peers", "[--json] [--config FILE]", "members with link class, RTT, throughput and MTU",
     "  --json                 the members as a JSON list\n" CONFIG_LINE},
    {"doctor", "[--json] [--model NAME] [--config FILE]",
     "check links both ways: MTU, clock skew, RTT/throughput matrix, codec cost, shares",
     "  --json                 the raw report as JSON\n"
     "  --model NAME           model whose step time per codec is estimated: lenet5, mlp,\n"
     "                         vgg7, resnet20, resnet18, resnet34, resnet50, mobilenet_v2,\n"
     "                         vgg11_bn, vgg16 or vgg16_bn (lenet5)\n" CONFIG_LINE},
    {"members", "[--json] [--config FILE]",
     "the chief, the term, and every member's role (voter, witness, spare)",
     "  --json                 as JSON: chief, term, quorum, chief_reason, members [{node,\n"
     "                         role, raft, link, chief}], revoked, the replicated "
     "state\n" CONFIG_LINE
     "  With no chief (no majority of voters reachable) the first line says why.\n"},
    {"revoke", "NODE [--wait SECONDS] [--config FILE]",
     "deny a node the cluster: every member closes its links and refuses it",
     "  NODE                   the node id (gradmesh members)\n"
     "  --wait SECONDS         how long to wait for the chief to commit it (1-3600, "
     "10)\n" CONFIG_LINE
     "  The denylist is replicated by the chief; revoking the chief itself, or a voter\n"
     "  whose loss would leave no majority, is refused.\n"},
    {"role", "NODE voter|witness|spare [--wait SECONDS] [--config FILE]",
     "set a member's role: voter (votes, trains), witness (votes only), spare",
     "  NODE                   the node id (gradmesh members)\n"
     "  voter|witness|spare    voter: votes for the chief and trains; witness: votes,\n"
     "                         never trains; spare: follows the replicated state only\n"
     "  --wait SECONDS         how long to wait for the chief to commit it (1-3600, "
     "10)\n" CONFIG_LINE
     "  A change that would leave the voters without a reachable majority is refused.\n"},
    {"submit", "JOB.ini [--follow] [--config FILE]",
     "run a job on the cluster (every member must hold the same dataset)",
     "  JOB.ini                the job file (gradmesh-job(5)); checked here first (exit 78)\n"
     "  --follow               show progress (with an ETA) until the job ends, then its test\n"
     "                         accuracy and where the weights are; Ctrl-C detaches (exit\n"
     "                         130), the job runs on\n" CONFIG_LINE
     "  The local agent passes the job to the coordinator (the elected chief; with no\n"
     "  chief the job is refused); a member without the same files at [data] dir refuses it.\n"},
    {"jobs", "[--json] [--follow [ID]] [--config FILE]",
     "the running job and the last finished ones",
     "  --json                 as JSON: id, state, step, epoch, world, loss, samples/s, bytes\n"
     "                         per link, where the weights are (raw numbers)\n"
     "  --follow [ID]          attach to job ID (default: the running one) from any member\n"
     "                         and show its progress until it ends; Ctrl-C detaches (exit\n"
     "                         130), the job runs on\n" CONFIG_LINE},
    {"cancel", "ID [--config FILE]", "stop a job at its next step boundary",
     "  ID                     the job's id (gradmesh jobs)\n" CONFIG_LINE
     "  Works on any member: a member forwards it to the coordinator, as it does a submit.\n"
     "  The coordinator keeps the weights of the last finished step.\n"},
    {"checkpoint", "list [--json] | export ID PATH [--full]  [--config FILE]",
     "list this agent's checkpoints; export one as a safetensors file",
     "  list                   ID (KEY-STEP), job, model, step, epoch, size (MB), state (ok,\n"
     "                         refused, uncommitted) and the nodes that hold it; every file\n"
     "                         is verified against its .sha256\n"
     "  --json                 list as JSON\n"
     "  export ID PATH         write checkpoint ID (or latest) to PATH: the weights and\n"
     "                         metadata, a state_dict for safetensors and PyTorch\n"
     "  --full                 export the whole checkpoint (optimizer and codec state "
     "too)\n" CONFIG_LINE
     "  Checkpoints live in STATE_DIR/checkpoints/KEY/ (KEY: from the job file's text).\n"},
    {"train",
     "--local JOB.ini [--summary-json FILE] [--out FILE] [--tensorboard DIR]\n"
     "                     [--no-tensorboard] [--no-progress] [--resume CKPT|DIR]\n"
     "                     [--simulate-workers N] [--no-error-feedback]\n"
     "                     [--simulate-resize STEP:H[:BITS],...]",
     "train a job on this machine alone (no agent, no network)",
     "  --local JOB.ini        the job file (gradmesh-job(5))\n"
     "  --summary-json FILE    write the run summary (accuracy, speed, ...) as JSON\n"
     "  --out FILE             final weights (safetensors); default: the job's out\n"
     "  --tensorboard DIR      TensorBoard event files go here (default:\n"
     "                         runs/JOBNAME-YYYYmmdd-HHMMSS)\n"
     "  --no-tensorboard       write no event files\n"
     "  --no-progress          log lines instead of a progress bar on a terminal\n"
     "  --resume CKPT|DIR      go on from a checkpoint (the job's checkpoint_every writes\n"
     "                         them), or the newest valid one of a directory; a refused one\n"
     "                         (corrupt, truncated, another job) falls back to the one before\n"
     "  --simulate-workers N   N data-parallel replicas in this process (1-64), codec from\n"
     "                         the job's [comm]; bytes_sent and codec in the summary\n"
     "  --no-error-feedback    with powersgd: turn error feedback off (experiments)\n"
     "  --simulate-resize STEP:H[:BITS],...\n"
     "                         with diloco: replay auto's re-sizes from a cluster's log\n"
     "                         (event=codec-switch step=...): from the first round boundary\n"
     "                         at or after STEP, H local steps and BITS-bit deltas (16, 8)\n"
     "  SIGINT/SIGTERM stop at the next step and still save the weights (exit 130).\n"},
    {"version", "[--json]", "this binary's version, commit, build options (CUDA) and peer protocol",
     "  --json                 as JSON: version, commit, cuda, options, proto\n"
     "  `gradmesh status` shows each member's version; gradmesh_build_info carries\n"
     "  these values as labels.\n"},
};

static const struct verb_help *find(const char *verb)
{
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(verbs[i].verb, verb) == 0)
            return &verbs[i];
    return NULL;
}

void gm_cli_usage(FILE *f)
{
    fprintf(f, "usage: gradmesh COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        fprintf(f, "  %-8s %s\n", verbs[i].verb, verbs[i].summary);
    fprintf(f, "\n'gradmesh COMMAND --help' describes one command; man gradmesh has them all,\n"
               "man gradmesh.conf the config file, man gradmesh-job the job file.\n"
               "'gradmesh --version' (or 'gradmesh version') says which build this is.\n"
               "Exit codes: 0 success, 1 runtime failure, 2 usage, 78 configuration error.\n");
}

int gm_cli_help(FILE *f, const char *verb)
{
    const struct verb_help *v = find(verb);

    if (v == NULL)
        return -1;
    fprintf(f, "usage: gradmesh %s %s\n\n%s.\n\n%s", v->verb, v->synopsis, v->summary, v->text);
    fprintf(f, "See gradmesh(1), section %s.\n", v->verb);
    return 0;
}

void gm_cli_usage_hint(const char *verb)
{
    const struct verb_help *v = find(verb);

    if (v != NULL)
        fprintf(stderr, "usage: gradmesh %s %s\n", v->verb, v->synopsis);
    fprintf(stderr, "Try 'gradmesh %s --help'.\n", verb);
}

/*
 * agent/cli/cli_chief.c - `gradmesh members`, `gradmesh revoke NODE` and
 * `gradmesh role NODE voter|witness|spare`: the chief's view of the cluster
 * and the changes only the chief makes (agent/cluster/chief.h).
 *
 * revoke and role ask the local agent, which proposes the change when it is
 * the chief and forwards it to the chief otherwise; the command then polls
 * the outcome (chief-result) until it is committed or refused, for at most
 * --wait seconds (default 10).  Exit 0: committed; 1: refused, no chief, or
 * no outcome in time (the message says which); 2: usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "agent/cli/cli.h"
#include "common/err.h"

#define POLL_MS 100

static int parse(int argc, char **argv, const char *cmd, const char **config, int *as_json,
                 int *wait_s, int nargs)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"wait", required_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    int o;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'f') {
            *config = optarg;
        } else if (o == 'j' && as_json != NULL) {
            *as_json = 1;
        } else if (o == 'w' && wait_s != NULL) {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end != '\0' || v < 1 || v > 3600) {
                fprintf(stderr, "gradmesh %s: --wait takes 1-3600 seconds\n", cmd);
                o = '?';
            } else {
                *wait_s = (int)v;
            }
        } else {
            o = '?';
        }
        if (o == '?')
            break;
    }
    if (o == '?' || argc - optind != nargs) {
        gm_cli_usage_hint(cmd);
        return -1;
    }
    return 0;
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return s != NULL ? s : "-";
}

int gm_cli_members(int argc, char **argv)
{
    const char *config = NULL;
    int as_json = 0, err;
    json_t *r = NULL, *e;
    size_t i;

    if (parse(argc, argv, "members", &config, &as_json, NULL, 0) != 0)
        return GM_EXIT_USAGE;
    err = gm_cli_control("members", config, json_pack("{s:s}", "cmd", "members"), &r);
    if (err != 0)
        return gm_err_exit_code(err);
    if (as_json) {
        json_dumpf(r, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(r);
        return GM_EXIT_OK;
    }
    if (json_is_string(json_object_get(r, "chief")))
        printf("chief %s, term %lld\n", str(r, "chief"),
               (long long)json_integer_value(json_object_get(r, "term")));
    else
        printf("no chief (term %lld): %s\n",
               (long long)json_integer_value(json_object_get(r, "term")), str(r, "chief_reason"));
    printf("%-24s %-8s %-8s %-5s %s\n", "NODE", "ROLE", "RAFT", "LINK", "CHIEF");
    json_array_foreach(json_object_get(r, "members"), i, e)
    {
        printf("%-24s %-8s %-8s %-5s %s\n", str(e, "node"), str(e, "role"), str(e, "raft"),
               str(e, "link"), json_is_true(json_object_get(e, "chief")) ? "*" : "");
    }
    json_array_foreach(json_object_get(r, "revoked"), i, e)
    {
        printf("%-24s %-8s (term %lld)\n", str(e, "node"), "revoked",
               (long long)json_integer_value(json_object_get(e, "term")));
    }
    json_decref(r);
    return GM_EXIT_OK;
}

/* Polls chief-result req until it is done or refused, for at most wait_s seconds. */
static int await(const char *cmd, const char *config, json_int_t req, int wait_s)
{
    struct timespec nap = {0, POLL_MS * 1000000L};
    int polls = wait_s * (1000 / POLL_MS), err;

    for (int k = 0; k < polls; k++) {
        json_t *r = NULL;
        const char *state;

        err = gm_cli_control(cmd, config,
                             json_pack("{s:s, s:I}", "cmd", "chief-result", "req", req), &r);
        if (err != 0)
            return gm_err_exit_code(err);
        state = str(r, "state");
        if (strcmp(state, "done") == 0) {
            printf("%s\n", str(r, "message"));
            json_decref(r);
            return GM_EXIT_OK;
        }
        if (strcmp(state, "refused") == 0) {
            fprintf(stderr, "gradmesh %s: %s\n", cmd, str(r, "message"));
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        json_decref(r);
        nanosleep(&nap, NULL);
    }
    fprintf(stderr,
            "gradmesh %s: no outcome from the chief within %d s (it may have lost its "
            "majority); see `gradmesh members`\n",
            cmd, wait_s);
    return GM_EXIT_RUNTIME;
}

static int change(const char *cmd, const char *config, json_t *req, int wait_s)
{
    json_t *r = NULL;
    json_int_t id;
    int err = gm_cli_control(cmd, config, req, &r);

    if (err != 0)
        return gm_err_exit_code(err);
    id = json_integer_value(json_object_get(r, "req"));
    json_decref(r);
    return await(cmd, config, id, wait_s);
}

int gm_cli_revoke(int argc, char **argv)
{
    const char *config = NULL;
    int wait_s = 10;

    if (parse(argc, argv, "revoke", &config, NULL, &wait_s, 1) != 0)
        return GM_EXIT_USAGE;
    return change("revoke", config, json_pack("{s:s, s:s}", "cmd", "revoke", "node", argv[optind]),
                  wait_s);
}

int gm_cli_role(int argc, char **argv)
{
    const char *config = NULL;
    int wait_s = 10;

    if (parse(argc, argv, "role", &config, NULL, &wait_s, 2) != 0)
        return GM_EXIT_USAGE;
    if (strcmp(argv[optind + 1], "voter") != 0 && strcmp(argv[optind + 1], "witness") != 0 &&
        strcmp(argv[optind + 1], "spare") != 0) {
        fprintf(stderr, "gradmesh role: ROLE is voter, witness or spare, not '%s'\n",
                argv[optind + 1]);
        return gm_cli_usage_err("role");
    }
    return change(
        "role", config,
        json_pack("{s:s, s:s, s:s}", "cmd", "role", "node", argv[optind], "role", argv[optind + 1]),
        wait_s);
}

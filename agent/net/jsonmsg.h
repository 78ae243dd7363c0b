/*
 * agent/net/jsonmsg.h - the field readers of the JSON wire messages (jansson): load an
 * object, read a string or a non-negative integer field with its checks, dump an object
 * compactly.  Used by the codecs of every room: net/proto.c, cluster/chieffsm.c and
 * chiefmsg.c, jobs/jobmsg.c and ckptxfer.c.
 *
 * A field that is absent, of another JSON type, too long, holding a NUL byte or out of range
 * is GM_ERR_PROTO: these read bytes from the network and never trust them.  Pure functions;
 * any thread; no logging.
 */
#ifndef GM_AGENT_NET_JSONMSG_H
#define GM_AGENT_NET_JSONMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"

/* What a string field must be besides a JSON string without NUL that fits cap - 1 bytes
 * (the codecs differ here, so each says what it wants). */
enum {
    GM_JSONMSG_NONEMPTY = 1u << 0,  /* "" is refused */
    GM_JSONMSG_PRINTABLE = 1u << 1, /* printable ASCII only (gm_jsonmsg_printable) */
    GM_JSONMSG_OPTIONAL = 1u << 2,  /* absent: out is "" and 0; present: checked as usual */
};

/* The JSON object in len bytes at p (duplicate keys refused), or NULL: not JSON, not an
 * object, p NULL or len 0, or out of memory.  The caller json_decref()s it. */
json_t *gm_jsonmsg_load(const void *p, size_t len);

/* Encodes j compactly into a malloc'd string (*out, strlen *len) and json_decref()s j.
 * j NULL (a failed json_pack) or out of memory: -ENOMEM, *out NULL, *len 0. */
int gm_jsonmsg_dump(json_t *j, char **out, size_t *len) GM_MUST_CHECK;

/* Copies string field key of o into out (cap bytes; cap 0 writes nothing and refuses),
 * checked as flags say.  out is "" unless 0 is returned with the field present.  0 or
 * GM_ERR_PROTO. */
int gm_jsonmsg_get_str(json_t *o, const char *key, char *out, size_t cap,
                       unsigned flags) GM_MUST_CHECK;

/* A string field of exactly n > 0 lower-case hex digits, into out (cap > n).  out is "" on
 * error.  0 or GM_ERR_PROTO. */
int gm_jsonmsg_get_hex(json_t *o, const char *key, char *out, size_t cap, size_t n) GM_MUST_CHECK;

/* Integer field key of o in [0, max] into *out (untouched on error).  0 or GM_ERR_PROTO. */
int gm_jsonmsg_get_uint(json_t *o, const char *key, uint64_t max, uint64_t *out) GM_MUST_CHECK;

/* 0 when every key of o is one of the n keys (a typo is an error, not a silent default);
 * GM_ERR_PROTO otherwise. */
int gm_jsonmsg_keys_only(json_t *o, const char *const *keys, size_t n) GM_MUST_CHECK;

/* s is exactly n lower-case hex digits. */
bool gm_jsonmsg_is_hex(const char *s, size_t n);
/* s is printable ASCII (what is shown to people): 0x20..0x7e. */
bool gm_jsonmsg_printable(const char *s);

#endif

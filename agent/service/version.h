/*
 * agent/service/version.h - what this binary is: its version, the commit it was built from,
 * the build options that change behaviour (the CUDA backend), and the peer protocol version
 * it speaks.  `gradmesh version`, the gradmesh_build_info series and the HELLO a member sends
 * (agent/net/proto.h) all read them here, so the three always agree.
 *
 * The strings are fixed at build time by the Makefile (GM_BUILD_VERSION, GM_BUILD_COMMIT:
 * `git describe` and `git rev-parse` of the tree, or the VERSION file of a release tarball,
 * or "unknown").  Constant; any thread.
 */
#ifndef GM_AGENT_SERVICE_VERSION_H
#define GM_AGENT_SERVICE_VERSION_H

#define GM_VERSION_MAX 64 /* a version string, with its NUL */

/* "0.1.0-dev+gc481c98" or "v1.2.0": printable ASCII, no spaces, < GM_VERSION_MAX bytes */
const char *gm_version_string(void);
/* the full commit id, or "unknown" */
const char *gm_version_commit(void);
/* 1 when this binary has the CUDA backend */
int gm_version_cuda(void);
/* "cuda" or "cpu-only": the build options as one word, for labels and people */
const char *gm_version_options(void);

#endif

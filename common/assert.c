/* common/assert.c - the failure path of GM_ASSERT: print and abort. */
#include "common/assert.h"

#include <stdio.h>
#include <stdlib.h>

void gm_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "gradmesh: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

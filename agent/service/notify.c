/* agent/service/notify.c - see notify.h.  Thin: libsystemd does the protocol. */
#include "agent/service/notify.h"

#include <stdio.h>

#include <systemd/sd-daemon.h>

#include "common/log.h"

static void notify_send(const char *msg)
{
    int r = sd_notify(0, msg);

    if (r < 0)
        gm_debug("event=sd-notify-failed err=%d", r);
}

uint64_t gm_notify_watchdog_ms(void)
{
    uint64_t usec = 0;

    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return 0;
    return usec / 2000 > 0 ? usec / 2000 : 1;
}

void gm_notify_ready(const char *status)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
    notify_send(msg);
}

void gm_notify_status(const char *text)
{
    char msg[300];

    snprintf(msg, sizeof(msg), "STATUS=%s", text);
    notify_send(msg);
}

void gm_notify_watchdog(void)
{
    notify_send("WATCHDOG=1");
}

void gm_notify_stopping(void)
{
    notify_send("STOPPING=1\nSTATUS=stopping");
}

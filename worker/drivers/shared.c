/*
 * shared.c: what the drivers share (shared.h). Hidden state: the cgroup hierarchies of this
 * process (detected, host_cgroups, under detect_lock), set by the first driver_cgroups call.
 */
#include "drivers/shared.h"
#include "log.h"

#include "clock.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

bool shape_equal(const struct store_shape *a, const struct store_shape *b)
{
    return strcmp(a->driver, b->driver) == 0 && strcmp(a->image, b->image) == 0 &&
           a->vcpu_count == b->vcpu_count && a->mem_size_mib == b->mem_size_mib;
}

static pthread_mutex_t detect_lock = PTHREAD_MUTEX_INITIALIZER;
static bool detected;
static struct cgroup_host host_cgroups;

const struct cgroup_host *driver_cgroups(const struct sbx_config *cfg, const char *who)
{
    pthread_mutex_lock(&detect_lock);
    if (!detected) {
        char report[1024];
        cgroup_detect(cfg, &host_cgroups, report, sizeof report);
        log_info("%s: %s", who, report);
        detected = true;
    }
    pthread_mutex_unlock(&detect_lock);
    return &host_cgroups;
}

int driver_ready_line(const char *line, size_t len, struct sandbox_runtime *rt, char *agent_err,
                      size_t agent_errlen)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, 0, &jerr);
    const char *type = json_string_value(json_object_get(msg, "type"));
    const char *kernel = json_string_value(json_object_get(msg, "kernel"));
    const char *error = json_string_value(json_object_get(msg, "error"));
    int rc = 0;
    if (!type || strcmp(type, "ready") != 0) {
        snprintf(agent_err, agent_errlen, "%s", error ? error : "");
        rc = -1;
    } else {
        snprintf(rt->kernel, sizeof rt->kernel, "%s", kernel ? kernel : "");
    }
    json_decref(msg);
    return rc;
}

enum driver_line driver_read_line(int fd, int64_t deadline_ms, bool (*gone)(void *arg),
                                  void *gone_arg, char *out, size_t outlen, size_t *len)
{
    size_t have = 0;
    *len = 0;
    out[0] = '\0';
    for (;;) {
        if (have + 1 >= outlen)
            return DRIVER_LINE_TOO_LONG;
        ssize_t n = recv(fd, out + have, outlen - 1 - have, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) {
            char *nl = memchr(out + have, '\n', (size_t)n);
            size_t take = nl ? (size_t)(nl - (out + have)) + 1 : (size_t)n;
            if (read(fd, out + have, take) != (ssize_t)take)
                return DRIVER_LINE_ERROR;
            have += take;
            if (nl) {
                out[--have] = '\0'; /* drop the newline */
                *len = have;
                return DRIVER_LINE_OK;
            }
            continue;
        }
        if (n == 0)
            return DRIVER_LINE_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return DRIVER_LINE_ERROR;
        if (gone && gone(gone_arg))
            return DRIVER_LINE_GONE;
        int64_t left = deadline_ms - clock_mono_ms();
        if (left <= 0)
            return DRIVER_LINE_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, gone && left > 100 ? 100 : (int)left);
    }
}

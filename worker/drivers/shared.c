/*
 * shared.c: what the drivers share (shared.h). Hidden state: the cgroup hierarchies of this
 * process (detected, host_cgroups, under detect_lock), set by the first driver_cgroups call.
 */
#include "drivers/shared.h"
#include "log.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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

/*
 * registry.c: the table of Sandbox drivers built into sbx-worker and lookup by name. A new driver
 * is one more line in the table below (and its extern in driver.h); test builds pass a finder of
 * their own to worker_init instead.
 */
#include "drivers/driver.h"

#include <string.h>

static const struct driver *const drivers[] = {
    &driver_process,
    &driver_qemu,
    &driver_firecracker,
};

const struct driver *driver_find(const char *name)
{
    for (size_t i = 0; i < sizeof drivers / sizeof *drivers; i++)
        if (strcmp(drivers[i]->name, name) == 0)
            return drivers[i];
    return NULL;
}

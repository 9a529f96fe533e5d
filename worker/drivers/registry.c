/*
 * registry.c: the table of Sandbox drivers and lookup by name. Other drivers (qemu, firecracker)
 * add themselves here.
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

/*
 * shared.h: what the drivers (and the Sandboxes above them) share rather than copy: comparing
 * Sandbox shapes.
 */
#ifndef SBX_DRIVERS_SHARED_H
#define SBX_DRIVERS_SHARED_H

#include "store.h"

#include <stdbool.h>

/* Whether two shapes are the same (driver, image, vCPUs, memory): a warm Sandbox of one serves
 * the other. */
bool shape_equal(const struct store_shape *a, const struct store_shape *b);

#endif

/*
 * shared.c: what the drivers share (shared.h).
 */
#include "drivers/shared.h"

#include <string.h>

bool shape_equal(const struct store_shape *a, const struct store_shape *b)
{
    return strcmp(a->driver, b->driver) == 0 && strcmp(a->image, b->image) == 0 &&
           a->vcpu_count == b->vcpu_count && a->mem_size_mib == b->mem_size_mib;
}

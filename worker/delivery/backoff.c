/*
 * backoff.c: retry delays (delivery.h).
 */
#include "delivery/delivery.h"
#include "id.h"

int64_t backoff_delay_ms(int64_t attempt, int64_t base_ms, int64_t max_ms)
{
    int64_t d = base_ms;
    uint32_t r = 0;
    if (base_ms <= 0 || max_ms <= 0)
        return 0;
    for (int64_t i = 1; i < attempt && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    if (random_bytes(&r, sizeof r) != 0)
        return d;
    return d / 2 + (int64_t)(r % (uint32_t)(d / 2 + 1));
}

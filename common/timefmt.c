/*
 * timefmt.c: timestamp formatting (timefmt.h).
 */
#include "timefmt.h"

#include <stdio.h>
#include <time.h>

void time_format_ms(int64_t ms, char *out, size_t outlen)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

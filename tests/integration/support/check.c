/*
 * check.c: the failure count behind CHECK and REQUIRE (check.h).
 */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>

static int failures;

bool check_that(bool ok, const char *what, const char *file, int line, const char *fmt, ...)
{
    if (ok)
        return true;
    fprintf(stderr, "FAIL %s:%d: %s: ", file, line, what);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    failures++;
    return false;
}

int check_failures(void)
{
    return failures;
}

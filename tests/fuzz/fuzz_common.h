/*
 * fuzz_common.h: helpers the libFuzzer targets share: a NUL-terminated copy of the input and a
 * check that aborts (so libFuzzer saves the input as a crash) when a parser breaks a promise
 * its header makes.
 */
#ifndef SBX_FUZZ_COMMON_H
#define SBX_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A heap copy of data with a NUL after it, so ASan catches reads past the caller's bytes. */
static inline char *fuzz_cstr(const unsigned char *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Whether s is a NUL-terminated string within cap bytes (an error field or detail). */
static inline int fuzz_terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

#endif

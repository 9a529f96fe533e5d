/*
 * check.h: the assertions of the integration tests that drive real Sandboxes from C without
 * cmocka (a VM boot cannot be redone per assertion): CHECK counts a failure and goes on, REQUIRE
 * jumps to the test's `out:` label. Both evaluate cond exactly once (it may boot a VM).
 */
#ifndef SBX_TESTS_CHECK_H
#define SBX_TESTS_CHECK_H

#include <stdbool.h>

#define CHECK(cond, ...) check_that((cond), #cond, __FILE__, __LINE__, __VA_ARGS__)
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!CHECK(cond, __VA_ARGS__))                                                             \
            goto out;                                                                              \
    } while (0)

/* Returns ok; when false, prints "FAIL file:line: what: <fmt...>" and counts a failure. */
__attribute__((format(printf, 5, 6))) bool check_that(bool ok, const char *what, const char *file,
                                                      int line, const char *fmt, ...);

/* The failures counted so far. */
int check_failures(void);

#endif

/*
 * test_userns_map.c: host/userns_map.h from several threads at once, as concurrent boots of an
 * imported image call it (each boot maps the image's user). Every call must return: a helper
 * child that waited on a descriptor another thread's child had inherited hung both boots. Needs
 * root (writing a map that is not the caller's own); skipped otherwise.
 */
#include "host/userns_map.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 300 };

static void *open_many(void *arg)
{
    intptr_t failures = 0;
    char err[256];
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        int fd = userns_map_open("0 0 1000\n", "0 0 1000\n", err, sizeof err);
        if (fd < 0) {
            fprintf(stderr, "userns_map_open: %s\n", err);
            failures++;
            continue;
        }
        close(fd);
    }
    return (void *)failures;
}

static void concurrent_calls_all_return(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, open_many, NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        void *failures = NULL;
        assert_int_equal(pthread_join(t[i], &failures), 0);
        assert_int_equal((intptr_t)failures, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(concurrent_calls_all_return)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_backoff.c: retry delays grow exponentially, stay within [d/2, d] (jitter), and are capped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "delivery/delivery.h"

static void test_backoff_doubles_with_jitter_and_cap(void **state)
{
    (void)state;
    for (int64_t attempt = 1; attempt <= 12; attempt++) {
        int64_t full = 100;
        for (int64_t i = 1; i < attempt; i++)
            full = full * 2 > 5000 ? 5000 : full * 2;
        int64_t lo = INT64_MAX, hi = 0;
        for (int k = 0; k < 200; k++) {
            int64_t d = backoff_delay_ms(attempt, 100, 5000);
            assert_true(d >= full / 2 && d <= full);
            lo = d < lo ? d : lo;
            hi = d > hi ? d : hi;
        }
        assert_true(hi > lo); /* jittered, not a constant */
    }
    assert_int_equal(backoff_delay_ms(3, 0, 5000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_doubles_with_jitter_and_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_sandbox_state.c: a Sandbox's state changes only along sandbox.h's transition table:
 * every documented transition is allowed, every other pair refused, and a debug build aborts on a
 * refused change instead of carrying on with a lifecycle the rest of the worker does not expect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sandbox/sandbox.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_STATES (SB_STOPPING + 1)

/* sandbox.h's table, written out again: a change to one without the other fails here. */
static const struct {
    enum sandbox_state from, to;
} documented[] = {
    {SB_BOOTING, SB_WARM},     {SB_BOOTING, SB_ACTIVATING}, {SB_WARM, SB_ACTIVATING},
    {SB_ACTIVATING, SB_BUSY},  {SB_IDLE, SB_BUSY},          {SB_BUSY, SB_IDLE},
    {SB_BOOTING, SB_STOPPING}, {SB_WARM, SB_STOPPING},      {SB_ACTIVATING, SB_STOPPING},
    {SB_IDLE, SB_STOPPING},    {SB_BUSY, SB_STOPPING},
};

static bool is_documented(enum sandbox_state from, enum sandbox_state to)
{
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++)
        if (documented[i].from == from && documented[i].to == to)
            return true;
    return false;
}

static void test_table_is_the_documented_one(void **state)
{
    (void)state;
    for (int from = 0; from < N_STATES; from++)
        for (int to = 0; to < N_STATES; to++) {
            bool want = is_documented(from, to);
            if (sandbox_transition_ok(from, to) != want)
                fail_msg("%s -> %s: %s, sandbox.h says %s", sandbox_state_name(from),
                         sandbox_state_name(to), want ? "refused" : "allowed",
                         want ? "allowed" : "not");
        }
}

static void test_set_state_follows_a_lifecycle(void **state)
{
    (void)state;
    struct sandbox sb;
    memset(&sb, 0, sizeof sb);
    snprintf(sb.rt.sandbox_id, sizeof sb.rt.sandbox_id, "sbx_test");
    sb.state = SB_BOOTING;
    const enum sandbox_state path[] = {SB_WARM, SB_ACTIVATING, SB_BUSY,
                                       SB_IDLE, SB_BUSY,       SB_STOPPING};
    for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
        sandbox_set_state(&sb, path[i]);
        assert_int_equal(sb.state, path[i]);
    }
}

static void test_refused_change_aborts_a_debug_build(void **state)
{
    (void)state;
#ifdef NDEBUG
    skip();
#else
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sandbox sb;
        memset(&sb, 0, sizeof sb);
        sb.state = SB_WARM;
        sandbox_set_state(&sb, SB_BUSY); /* a warm Sandbox was never started */
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_the_documented_one),
        cmocka_unit_test(test_set_state_follows_a_lifecycle),
        cmocka_unit_test(test_refused_change_aborts_a_debug_build),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

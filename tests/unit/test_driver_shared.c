/*
 * test_driver_shared.c: what the drivers share (worker/drivers/shared.h) on a real socketpair:
 * the agent's ready line is read up to its newline and no further (the next line stays for the
 * event loop), and each way it can fail is told apart; the ready line sets the kernel, anything
 * else is refused with the agent's own error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "drivers/shared.h"
#include "clock.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void pair(int fds[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
}

static bool always_gone(void *arg)
{
    (*(int *)arg)++;
    return true;
}

static void test_reads_one_line_and_leaves_the_rest(void **state)
{
    int fds[2];
    char line[64], rest[64];
    size_t len = 99;
    (void)state;
    pair(fds);
    const char *sent = "{\"type\":\"ready\"}\n{\"type\":\"started\"}\n";
    assert_int_equal(write(fds[1], sent, strlen(sent)), (ssize_t)strlen(sent));
    assert_int_equal(
        driver_read_line(fds[0], clock_mono_ms() + 2000, NULL, NULL, line, sizeof line, &len),
        DRIVER_LINE_OK);
    assert_string_equal(line, "{\"type\":\"ready\"}");
    assert_int_equal(len, strlen(line));
    ssize_t n = read(fds[0], rest, sizeof rest - 1);
    assert_true(n > 0);
    rest[n] = '\0';
    assert_string_equal(rest, "{\"type\":\"started\"}\n");
    close(fds[0]);
    close(fds[1]);
}

static void test_line_split_across_writes(void **state)
{
    int fds[2];
    char line[64];
    size_t len;
    (void)state;
    pair(fds);
    assert_int_equal(write(fds[1], "{\"type\":", 8), 8);
    assert_int_equal(write(fds[1], "\"ready\"}\nx", 10), 10);
    assert_int_equal(
        driver_read_line(fds[0], clock_mono_ms() + 2000, NULL, NULL, line, sizeof line, &len),
        DRIVER_LINE_OK);
    assert_string_equal(line, "{\"type\":\"ready\"}");
    close(fds[0]);
    close(fds[1]);
}

static void test_each_failure_is_told_apart(void **state)
{
    int fds[2], asked = 0;
    char line[16];
    size_t len;
    (void)state;

    pair(fds);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(driver_read_line(fds[0], t0 + 150, NULL, NULL, line, sizeof line, &len),
                     DRIVER_LINE_TIMEOUT);
    assert_true(clock_mono_ms() - t0 >= 150);
    assert_int_equal(driver_read_line(fds[0], clock_mono_ms() + 5000, always_gone, &asked, line,
                                      sizeof line, &len),
                     DRIVER_LINE_GONE);
    assert_int_equal(asked, 1);
    assert_int_equal(write(fds[1], "0123456789abcdefghij", 20), 20);
    assert_int_equal(
        driver_read_line(fds[0], clock_mono_ms() + 2000, NULL, NULL, line, sizeof line, &len),
        DRIVER_LINE_TOO_LONG);
    close(fds[0]);
    close(fds[1]);

    pair(fds);
    assert_int_equal(write(fds[1], "half", 4), 4);
    close(fds[1]);
    assert_int_equal(
        driver_read_line(fds[0], clock_mono_ms() + 2000, NULL, NULL, line, sizeof line, &len),
        DRIVER_LINE_CLOSED);
    close(fds[0]);
}

static void test_ready_line_sets_the_kernel_or_is_refused(void **state)
{
    struct sandbox_runtime rt;
    char agent_err[64];
    (void)state;
    memset(&rt, 0, sizeof rt);
    const char *ready = "{\"type\":\"ready\",\"kernel\":\"6.1.0-sbx\"}";
    assert_int_equal(driver_ready_line(ready, strlen(ready), &rt, agent_err, sizeof agent_err), 0);
    assert_string_equal(rt.kernel, "6.1.0-sbx");
    const char *failed = "{\"type\":\"error\",\"error\":\"no /workspace\"}";
    assert_int_equal(driver_ready_line(failed, strlen(failed), &rt, agent_err, sizeof agent_err),
                     -1);
    assert_string_equal(agent_err, "no /workspace");
    assert_int_equal(driver_ready_line("not json", 8, &rt, agent_err, sizeof agent_err), -1);
    assert_string_equal(agent_err, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_one_line_and_leaves_the_rest),
        cmocka_unit_test(test_line_split_across_writes),
        cmocka_unit_test(test_each_failure_is_told_apart),
        cmocka_unit_test(test_ready_line_sets_the_kernel_or_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

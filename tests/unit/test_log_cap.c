/*
 * test_log_cap.c: unit.worker.host.log_cap: a VMM-style writer (a child with the file open O_APPEND
 * and log_cap_child_limit set, as the qemu driver starts QEMU) floods a watched log with 64 MiB;
 * the log never exceeds its cap, the rotated copy exists and is within it too, the writer is not
 * killed by SIGXFSZ, and its latest lines are in the log (or, if the last rotation emptied it,
 * in the rotated copy). An unwatched file is left alone.
 */
#include "host/log_cap.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define CAP (256 * 1024)

static char dir[64];

static off_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Writes total bytes of numbered lines to path (O_APPEND) under the cap; the child's exit status
 * says whether it was killed. */
static pid_t flood(const char *path, long total)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0 || log_cap_child_limit(CAP) != 0)
            _exit(2);
        char line[128];
        for (long written = 0, n = 0; written < total; n++) {
            int len = snprintf(line, sizeof line, "line %08ld %0100d\n", n, 0);
            /* Past the cap the write fails with EFBIG and the line is dropped, as QEMU drops
             * console output then. */
            ssize_t ignored = write(fd, line, (size_t)len);
            (void)ignored;
            written += len;
            if (n % 512 == 0) {
                struct timespec ts = {0, 1000000}; /* 1 ms: about 60 MiB/s, a fast console */
                nanosleep(&ts, NULL);
            }
        }
        _exit(0);
    }
    return pid;
}

static void test_flood_stays_at_cap(void **state)
{
    (void)state;
    char path[128], older[160];
    snprintf(path, sizeof path, "%s/console.log", dir);
    snprintf(older, sizeof older, "%s.1", path);
    assert_int_equal(log_cap_watch(path, CAP), 0);
    pid_t pid = flood(path, 64L * 1024 * 1024);
    off_t largest = 0;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        off_t now = size_of(path);
        if (now > largest)
            largest = now;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* not killed by SIGXFSZ */
    assert_true(largest <= CAP);
    assert_true(size_of(path) <= CAP);
    /* Once the writer has ended, the rotator acts at most once more (the log may sit at its cap
     * when the writer stops) and then leaves both files alone: wait, boundedly, for the log to be
     * below its cap. The latest lines are in the log, or in the rotated copy if that last
     * rotation emptied the log. */
    off_t sz = size_of(path);
    for (int waited = 0; sz >= CAP && waited < 50; waited++) {
        struct timespec settle = {0, LOG_CAP_INTERVAL_MS * 1000000L};
        nanosleep(&settle, NULL);
        sz = size_of(path);
    }
    assert_true(sz >= 0 && sz < CAP);
    /* Checked only now: a rotation in progress holds the copy partly written. */
    assert_true(size_of(older) > 0); /* it rotated */
    assert_true(size_of(older) <= CAP);
    const char *latest = sz > 0 ? path : older;
    if (sz == 0)
        sz = size_of(older);
    char tail[256];
    int fd = open(latest, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = pread(fd, tail, sizeof tail - 1, sz > 200 ? sz - 200 : 0);
    close(fd);
    assert_true(n > 0);
    tail[n] = '\0';
    assert_non_null(strstr(tail, "line "));
    log_cap_unwatch(path);
}

static void test_unwatched_file_is_left_alone(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/other.log", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 2 * CAP), 0);
    close(fd);
    assert_int_equal(log_cap_watch(path, CAP), 0);
    log_cap_unwatch(path);
    struct timespec ts = {0, 3 * LOG_CAP_INTERVAL_MS * 1000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(size_of(path), 2 * CAP);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/sbx-log-cap-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_stays_at_cap),
        cmocka_unit_test(test_unwatched_file_is_left_alone),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}

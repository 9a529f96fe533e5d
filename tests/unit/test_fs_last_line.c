/*
 * test_fs_last_line.c: fs_last_line(), which puts a helper's or a VMM's last log line into an
 * error: the last line without its line end, a line longer than the buffer cut at its front, and
 * -1 for a missing or empty file or one of blank lines.
 */
#include "fs.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/sbx-fs-last-line-XXXXXX";
static char path[256];

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void test_the_last_line_without_its_end(void **state)
{
    (void)state;
    char line[64];
    write_file("qemu: starting\nqemu: -drive: Could not open 'rootfs.erofs'\n");
    assert_int_equal(fs_last_line(path, line, sizeof line), 0);
    assert_string_equal(line, "qemu: -drive: Could not open 'rootfs.erofs'");
    write_file("first\r\nsecond\r\n\r\n");
    assert_int_equal(fs_last_line(path, line, sizeof line), 0);
    assert_string_equal(line, "second");
    write_file("no newline at all");
    assert_int_equal(fs_last_line(path, line, sizeof line), 0);
    assert_string_equal(line, "no newline at all");
}

static void test_a_long_line_is_cut_at_its_front(void **state)
{
    (void)state;
    char line[8];
    write_file("earlier\n0123456789ABCDEF\n");
    assert_int_equal(fs_last_line(path, line, sizeof line), 0);
    /* The last 7 bytes, "ABCDEF\n", without the line end. */
    assert_string_equal(line, "ABCDEF");
}

static void test_nothing_to_say_is_minus_one(void **state)
{
    (void)state;
    char line[64] = "untouched";
    write_file("");
    assert_int_equal(fs_last_line(path, line, sizeof line), -1);
    write_file("\n\r\n\n");
    assert_int_equal(fs_last_line(path, line, sizeof line), -1);
    assert_int_equal(fs_last_line("/nonexistent/sbx/log", line, sizeof line), -1);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof path, "%s/log", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_last_line_without_its_end),
        cmocka_unit_test(test_a_long_line_is_cut_at_its_front),
        cmocka_unit_test(test_nothing_to_say_is_minus_one),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    rmdir(dir);
    return rc;
}

/*
 * test_store_chunks.c: the store's side of streaming on a real database (a SQLite file, or a
 * PostgreSQL database under tests/pg-run.sh: see store_fixture.h): chunks are stored only by the
 * lease holder, read back in order from any index, App- and Session-scoped, their drop count kept
 * on the message, their totals counted in bytes, and deleted with the Session; the newest event id.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store.h"
#include "store_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int setup(void **state)
{
    struct store_fixture *f = store_fixture_open("chunks", 10000, "NORMAL");
    db_exec(f, "INSERT INTO apps (id, name, command, created_at, updated_at) VALUES "
               "('app_a', 'a', '[\"sh\"]', 1, 1), ('app_b', 'b', '[\"sh\"]', 1, 1)");
    db_exec(f, "INSERT INTO sessions (id, app_id, created_at, updated_at) VALUES "
               "('ses_a', 'app_a', 1, 1)");
    db_exec(f, "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, created_at, "
               "updated_at) VALUES ('msg_a', 'ses_a', 'app_a', 1, '{}', 3, 1, 1)");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

static void lease_to(struct store_fixture *f, const char *worker)
{
    db_exec(f,
            "UPDATE messages SET state = 'delivering', lease_owner = '%s', lease_expires_at = "
            "9999999999999 WHERE id = 'msg_a'",
            worker);
}

static void test_only_the_lease_holder_appends_and_order_is_kept(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    const char *first[] = {"{\"n\":0}", "\"caf\xc3\xa9\"", "[1,2]"};
    const char *more[] = {"null"};
    struct store_chunk *c = NULL;
    size_t n = 0;
    int64_t dropped = -1, count = -1, bytes = -1;

    /* Not delivering: refused, nothing stored. */
    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_a", 0, first, 3, 0), STORE_CONFLICT);
    lease_to(f, "wrk_a");
    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_b", 0, first, 3, 0), STORE_CONFLICT);
    assert_int_equal(db_int(f, "SELECT count(*) FROM message_chunks"), 0);

    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_a", 0, first, 3, 0), STORE_OK);
    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_a", 3, more, 1, 5), STORE_OK);
    /* Only a drop count: no chunk, the count grows. */
    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_a", 4, NULL, 0, 2), STORE_OK);
    /* An index already taken is refused as a whole (the batch is one transaction). */
    assert_int_not_equal(store_chunk_append(st, "msg_a", "wrk_a", 3, first, 2, 0), STORE_OK);
    assert_int_equal(db_int(f, "SELECT chunks_dropped FROM messages WHERE id = 'msg_a'"), 7);

    assert_int_equal(store_chunk_totals(st, "msg_a", &count, &bytes), STORE_OK);
    assert_int_equal(count, 4);
    assert_int_equal(bytes, 7 + 7 + 5 + 4); /* bytes, not characters: "café" is 7 */

    assert_int_equal(store_chunk_list(st, "app_a", "ses_a", "msg_a", 0, 100, &c, &n, &dropped),
                     STORE_OK);
    assert_int_equal(n, 4);
    assert_int_equal(dropped, 7);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(c[i].index, (int64_t)i);
    assert_string_equal(c[0].value_json, "{\"n\":0}");
    assert_string_equal(c[1].value_json, "\"caf\xc3\xa9\"");
    assert_string_equal(c[3].value_json, "null");
    store_chunk_list_free(c, n);

    /* From an index on, with a limit. */
    assert_int_equal(store_chunk_list(st, "", "ses_a", "msg_a", 2, 1, &c, &n, NULL), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(c[0].index, 2);
    store_chunk_list_free(c, n);
    /* Past the end: found, no chunks. */
    assert_int_equal(store_chunk_list(st, "app_a", "ses_a", "msg_a", 4, 10, &c, &n, NULL),
                     STORE_OK);
    assert_int_equal(n, 0);
    store_chunk_list_free(c, n);
}

static void test_scoped_like_the_message_and_deleted_with_the_session(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    const char *one[] = {"1"};
    struct store_chunk *c = NULL;
    size_t n = 0;
    struct store_ctx gw = {"key:test", NULL};

    lease_to(f, "wrk_a");
    assert_int_equal(store_chunk_append(st, "msg_a", "wrk_a", 0, one, 1, 0), STORE_OK);
    assert_int_equal(store_chunk_list(st, "app_b", "ses_a", "msg_a", 0, 10, &c, &n, NULL),
                     STORE_NOT_FOUND);
    assert_int_equal(store_chunk_list(st, "app_a", "ses_x", "msg_a", 0, 10, &c, &n, NULL),
                     STORE_NOT_FOUND);
    assert_int_equal(store_chunk_list(st, "app_a", "ses_a", "msg_x", 0, 10, &c, &n, NULL),
                     STORE_NOT_FOUND);

    assert_int_equal(store_session_delete(st, &gw, "app_a", "ses_a"), STORE_OK);
    assert_int_equal(db_int(f, "SELECT count(*) FROM message_chunks"), 0);
    assert_int_equal(store_chunk_list(st, "app_a", "ses_a", "msg_a", 0, 10, &c, &n, NULL),
                     STORE_NOT_FOUND);
}

static void test_event_last_id_follows_the_audit_trail(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    int64_t before = -1, after = -1;
    struct store_session s;
    bool created;
    struct store_ctx gw = {"key:test", NULL};

    assert_int_equal(store_event_last_id(st, &before), STORE_OK);
    assert_int_equal(store_session_create(st, &gw, "app_a", "named", 0, NULL, NULL, &s, &created),
                     STORE_OK);
    store_session_clear(&s);
    assert_int_equal(store_event_last_id(st, &after), STORE_OK);
    assert_true(after > before);
    assert_int_equal(after, db_int(f, "SELECT max(id) FROM events"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_only_the_lease_holder_appends_and_order_is_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_scoped_like_the_message_and_deleted_with_the_session,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_last_id_follows_the_audit_trail, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

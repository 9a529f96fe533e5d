/*
 * test_store_images.c: the store's Images (common/store/sql/images.c) on SQLite, and on PostgreSQL
 * under tests/pg-run.sh (unit.store.pg.images): create, name conflicts, get by id or name, the
 * import claim (one worker at a time; a dead worker's claim is taken over), finishing ready or
 * failed (credentials cleared, events without them), Apps on an Image (the in-transaction
 * readiness check, the digest the shape carries, DELETE refused while named), and the digests a
 * host's cache keeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_fixture.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct store_ctx admin = {.actor = "admin", .request_id = "req_test"};
static const struct store_ctx wctx = {.actor = "worker:wrk_a", .request_id = NULL};
#define DIGEST "sha256:1111111111111111111111111111111111111111111111111111111111111111"

static int setup(void **state)
{
    *state = store_fixture_open("images", 2000, "NORMAL");
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

static void new_image(struct store *st, const char *name, const char *creds, struct store_image *im)
{
    memset(im, 0, sizeof *im);
    snprintf(im->name, sizeof im->name, "%s", name);
    snprintf(im->source, sizeof im->source, "%s", creds ? "127.0.0.1:5000/sbx/py:v1" : "upload");
    if (!creds)
        snprintf(im->upload_path, sizeof im->upload_path, "/data/images/uploads/%s.tar", name);
    im->upload_bytes = creds ? 0 : 4096;
    im->credentials_json = creds ? strdup(creds) : NULL;
    assert_int_equal(store_image_create(st, &admin, im), STORE_OK);
    free(im->credentials_json);
    im->credentials_json = NULL;
}

static void test_create_get_conflict_list(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_image a, b, got;
    new_image(st, "py", NULL, &a);
    assert_string_equal(a.state, "importing");
    assert_memory_equal(a.id, "img_", 4);
    struct store_image dup = {0};
    snprintf(dup.name, sizeof dup.name, "py");
    snprintf(dup.source, sizeof dup.source, "upload");
    assert_int_equal(store_image_create(st, &admin, &dup), STORE_CONFLICT);
    new_image(st, "pulled", "{\"username\":\"u\",\"password\":\"pw\"}", &b);
    assert_int_equal(store_image_get(st, "py", &got), STORE_OK);
    assert_string_equal(got.id, a.id);
    assert_int_equal(got.upload_bytes, 4096);
    assert_null(got.credentials_json); /* only the claim carries them */
    store_image_clear(&got);
    assert_int_equal(store_image_get(st, b.id, &got), STORE_OK);
    assert_string_equal(got.name, "pulled");
    store_image_clear(&got);
    assert_int_equal(store_image_get(st, "nope", &got), STORE_NOT_FOUND);

    struct store_image *items;
    size_t n;
    char next[STORE_CURSOR_LEN];
    assert_int_equal(store_image_list(st, "", 1, &items, &n, next), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(items[0].id, a.id);
    assert_true(next[0] != '\0');
    store_image_list_free(items, n);
    assert_int_equal(store_image_list(st, next, 10, &items, &n, next), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(items[0].id, b.id);
    store_image_list_free(items, n);
}

static void test_claim_finish_and_apps(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_image im, claimed, again, got;
    new_image(st, "pulled", "{\"username\":\"u\",\"password\":\"pw\"}", &im);
    assert_int_equal(store_worker_register(st, "wrk_a", "h", 1), STORE_OK);
    assert_int_equal(store_worker_register(st, "wrk_b", "h", 2), STORE_OK);
    assert_int_equal(store_image_claim_import(st, &wctx, "wrk_a", 60000, &claimed), STORE_OK);
    assert_string_equal(claimed.id, im.id);
    assert_non_null(claimed.credentials_json);
    assert_non_null(strstr(claimed.credentials_json, "pw"));
    store_image_clear(&claimed);
    /* wrk_a is alive: nobody else takes it. */
    assert_int_equal(store_image_claim_import(st, &wctx, "wrk_b", 60000, &again), STORE_EMPTY);
    /* An App cannot name it before it is ready. */
    struct store_app app = {0};
    snprintf(app.name, sizeof app.name, "on-image");
    app.keep_alive_seconds = 60;
    app.vcpu_count = 1;
    app.mem_size_mib = 256;
    app.max_attempts = 1;
    snprintf(app.driver, sizeof app.driver, "process");
    snprintf(app.image, sizeof app.image, "pulled");
    snprintf(app.image_id, sizeof app.image_id, "%s", im.id);
    snprintf(app.image_digest, sizeof app.image_digest, DIGEST);
    app.command_json = "[]";
    assert_int_equal(store_app_create(st, &admin, &app), STORE_CONFLICT);

    struct store_image_result res = {.ok = true,
                                     .digest = DIGEST,
                                     .layer_count = 2,
                                     .unpacked_bytes = 12345,
                                     .cmd_json = "[\"/usr/bin/python3\"]",
                                     .env_json = "[\"A=1\"]",
                                     .working_dir = "/opt",
                                     .user = ""};
    /* Only the claiming worker may finish it. */
    assert_int_equal(store_image_finish_import(st, &wctx, im.id, "wrk_b", &res), STORE_CONFLICT);
    assert_int_equal(store_image_finish_import(st, &wctx, im.id, "wrk_a", &res), STORE_OK);
    assert_int_equal(store_image_get(st, im.id, &got), STORE_OK);
    assert_string_equal(got.state, "ready");
    assert_string_equal(got.digest, DIGEST);
    assert_int_equal(got.layer_count, 2);
    assert_string_equal(got.cmd_json, "[\"/usr/bin/python3\"]");
    assert_null(got.entrypoint_json);
    assert_string_equal(got.working_dir, "/opt");
    assert_string_equal(got.user, "");
    store_image_clear(&got);
    assert_int_equal(db_int(f, "SELECT count(*) FROM images WHERE credentials IS NOT NULL"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind = 'image.imported'"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE data LIKE '%%pw%%'"), 0);

    /* Now the App can, with the digest; the shape carries it. */
    assert_int_equal(store_app_create(st, &admin, &app), STORE_OK);
    struct store_app read;
    assert_int_equal(store_app_get(st, app.id, &read), STORE_OK);
    assert_string_equal(read.image_digest, DIGEST);
    assert_string_equal(read.image_id, im.id);
    assert_string_equal(read.env_json, "{}");
    store_app_clear(&read);
    struct store_shape *shapes;
    size_t n;
    assert_int_equal(store_app_shapes(st, &shapes, &n), STORE_OK);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= strcmp(shapes[i].image, DIGEST) == 0;
    free(shapes);
    assert_true(found);
    char(*digests)[STORE_DIGEST_LEN];
    assert_int_equal(store_image_digests_in_use(st, &digests, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(digests[0], DIGEST);
    free(digests);

    /* DELETE is refused while the App names it, then allowed. */
    assert_int_equal(store_image_delete(st, &admin, im.id, NULL), STORE_CONFLICT);
    assert_int_equal(store_image_get(st, im.id, &got), STORE_OK);
    assert_int_equal(got.app_count, 1);
    store_image_clear(&got);
    const char *dflt = "";
    struct store_app_patch p = {.image = "default", .image_id = dflt, .image_digest = "default"};
    struct store_app after;
    assert_int_equal(store_app_update(st, &admin, app.id, &p, &after), STORE_OK);
    assert_string_equal(after.image_digest, "default");
    assert_string_equal(after.image_id, "");
    store_app_clear(&after);
    assert_int_equal(store_image_digests_ready(st, &digests, &n), STORE_OK);
    assert_int_equal(n, 1);
    free(digests);
    struct store_image gone;
    assert_int_equal(store_image_delete(st, &admin, im.id, &gone), STORE_OK);
    store_image_clear(&gone);
    assert_int_equal(store_image_get(st, im.id, &got), STORE_NOT_FOUND);
    assert_int_equal(store_image_digests_ready(st, &digests, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(digests);
}

static void test_dead_worker_claim_taken_over_and_failure(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_image im, claimed;
    new_image(st, "up", NULL, &im);
    assert_int_equal(store_worker_register(st, "wrk_a", "h", 1), STORE_OK);
    assert_int_equal(store_worker_register(st, "wrk_b", "h", 2), STORE_OK);
    assert_int_equal(store_image_claim_import(st, &wctx, "wrk_a", 60000, &claimed), STORE_OK);
    store_image_clear(&claimed);
    /* wrk_a stops (dies): its claim goes to wrk_b. */
    assert_int_equal(store_worker_stop(st, &wctx, "wrk_a", NULL), STORE_OK);
    assert_int_equal(store_image_claim_import(st, &wctx, "wrk_b", 60000, &claimed), STORE_OK);
    assert_string_equal(claimed.id, im.id);
    store_image_clear(&claimed);
    struct store_image_result res = {
        .ok = false, .problem_code = "image_path_escape", .problem_detail = "entry '../x'"};
    assert_int_equal(store_image_finish_import(st, &wctx, im.id, "wrk_a", &res), STORE_CONFLICT);
    assert_int_equal(store_image_finish_import(st, &wctx, im.id, "wrk_b", &res), STORE_OK);
    struct store_image got;
    assert_int_equal(store_image_get(st, im.id, &got), STORE_OK);
    assert_string_equal(got.state, "failed");
    assert_string_equal(got.problem_code, "image_path_escape");
    assert_string_equal(got.problem_detail, "entry '../x'");
    assert_string_equal(got.upload_path, "");
    assert_string_equal(got.digest, "");
    store_image_clear(&got);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind = 'image.failed'"), 1);
    assert_int_equal(store_image_claim_import(st, &wctx, "wrk_b", 60000, &claimed), STORE_EMPTY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_get_conflict_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_finish_and_apps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_worker_claim_taken_over_and_failure, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

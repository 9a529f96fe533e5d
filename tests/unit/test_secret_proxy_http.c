/*
 * test_secret_proxy_http.c: what the brokering proxy does to a request head
 * (worker/host/secret_proxy_http.c): a Sandbox's placeholder becomes its secret's value in header
 * values for the secret's hosts (exact and wildcard), and only there; toward any other host it
 * is a misuse and nothing is replaced; another Sandbox's placeholder is left as it is; a
 * placeholder in the request line is never replaced; inside Basic credentials the same rules. Plus
 * the framing the relay follows: request and response heads, chunked bodies split anywhere, and the
 * shapes refused as ambiguous.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/secret_proxy.h"
#include "host/secret_proxy_http.h"

#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct secret_set set;

static int setup(void **state)
{
    (void)state;
    const char *model_hosts[] = {"api.model.test", "*.model.test"};
    const char *other_hosts[] = {"git.test"};
    assert_int_equal(secret_set_add(&set, "MODEL_KEY", "sk-real-1234", 12, model_hosts, 2), 0);
    assert_int_equal(secret_set_add(&set, "GIT_TOKEN", "ghp_abc", 7, other_hosts, 1), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    secret_set_clear(&set);
    return 0;
}

static char *head_with(const char *fmt, const char *a, const char *b)
{
    char *h = malloc(4096);
    snprintf(h, 4096, fmt, a, b);
    return h;
}

static void test_replaced_for_its_hosts(void **state)
{
    (void)state;
    const char *ph = set.v[0].placeholder;
    char *h = head_with("POST /v1/messages?x=1 HTTP/1.1\r\nHost: api.model.test\r\n"
                        "x-api-key: %s\r\nAuthorization: Bearer %s\r\nExpect: 100-continue\r\n"
                        "Content-Length: 2\r\n\r\n",
                        ph, ph);
    struct sp_rewrite rw;
    assert_int_equal(sp_rewrite(&set, "api.model.test", h, strlen(h), &rw), 0);
    assert_null(rw.misused);
    assert_non_null(rw.head);
    assert_non_null(strstr(rw.head, "x-api-key: sk-real-1234\r\n"));
    assert_non_null(strstr(rw.head, "Authorization: Bearer sk-real-1234\r\n"));
    assert_null(strstr(rw.head, "sbx_ph_"));
    assert_null(strstr(rw.head, "Expect"));
    assert_int_equal(rw.nused, 1);
    assert_string_equal(rw.used[0]->name, "MODEL_KEY");
    assert_int_equal(rw.len, strlen(rw.head));
    sp_rewrite_free(&rw);

    /* A subdomain under the wildcard; the host's case does not matter. */
    assert_int_equal(sp_rewrite(&set, "EU.Model.test", h, strlen(h), &rw), 0);
    assert_null(rw.misused);
    assert_non_null(strstr(rw.head, "sk-real-1234"));
    sp_rewrite_free(&rw);
    free(h);
}

static void test_misuse(void **state)
{
    (void)state;
    const char *ph = set.v[0].placeholder;
    char *h = head_with("GET / HTTP/1.1\r\nHost: evil.test\r\nx-api-key: %s\r\nX-Other: %s\r\n\r\n",
                        ph, set.v[1].placeholder);
    struct sp_rewrite rw;
    /* Another host, the wildcard's own domain, and a name that only ends like it. */
    const char *hosts[] = {"evil.test", "model.test", "evilmodel.test", "api.model.test.evil", ""};
    for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
        assert_int_equal(sp_rewrite(&set, hosts[i], h, strlen(h), &rw), 0);
        assert_non_null(rw.misused);
        assert_null(rw.head);
    }
    free(h);

    /* One secret allowed here, the other not: the whole request is a misuse. */
    h = head_with("GET / HTTP/1.1\r\nHost: git.test\r\nA: %s\r\nB: %s\r\n\r\n",
                  set.v[1].placeholder, ph);
    assert_int_equal(sp_rewrite(&set, "git.test", h, strlen(h), &rw), 0);
    assert_ptr_equal(rw.misused, &set.v[0]);
    free(h);

    /* In the request line: a misuse toward another host, left alone toward its own. */
    h = head_with("GET /leak?k=%s HTTP/1.1\r\nHost: evil.test\r\n\r\n%s", ph, "");
    assert_int_equal(sp_rewrite(&set, "evil.test", h, strlen(h), &rw), 0);
    assert_non_null(rw.misused);
    assert_int_equal(sp_rewrite(&set, "api.model.test", h, strlen(h), &rw), 0);
    assert_null(rw.misused);
    assert_non_null(strstr(rw.head, ph));
    assert_int_equal(rw.nused, 0);
    sp_rewrite_free(&rw);
    free(h);
}

static void test_foreign_placeholder(void **state)
{
    (void)state;
    /* A placeholder of another Sandbox (same shape, not in this set) means nothing here. */
    struct secret_set other = {0};
    const char *hosts[] = {"api.model.test"};
    assert_int_equal(secret_set_add(&other, "MODEL_KEY", "other-value", 11, hosts, 1), 0);
    char *h = head_with("GET / HTTP/1.1\r\nHost: evil.test\r\nx-api-key: %s\r\n\r\n%s",
                        other.v[0].placeholder, "");
    struct sp_rewrite rw;
    assert_int_equal(sp_rewrite(&set, "api.model.test", h, strlen(h), &rw), 0);
    assert_null(rw.misused);
    assert_string_equal(rw.head, h);
    assert_int_equal(rw.nused, 0);
    sp_rewrite_free(&rw);
    assert_int_equal(sp_rewrite(&set, "evil.test", h, strlen(h), &rw), 0);
    assert_null(rw.misused);
    sp_rewrite_free(&rw);
    free(h);

    /* A copy keeps the placeholders and values (what the proxy's registry hands over). */
    struct secret_set copy;
    assert_int_equal(secret_set_copy(&copy, &other), 0);
    assert_string_equal(copy.v[0].placeholder, other.v[0].placeholder);
    assert_memory_equal(copy.v[0].value, "other-value", 11);
    assert_true(secret_binding_allows_host(&copy.v[0], "api.model.test"));
    secret_set_clear(&copy);
    secret_set_clear(&other);
}

static char *b64(const char *text)
{
    size_t n = strlen(text);
    char *out = calloc(1, BASE64_ENCODE_RAW_LENGTH(n) + 1);
    base64_encode_raw(out, n, (const uint8_t *)text);
    return out;
}

/* A token sent as a Basic password (git over HTTPS): replaced inside the credentials, for its
 * hosts only. */
static void test_basic_auth(void **state)
{
    (void)state;
    char creds[128], line[512];
    snprintf(creds, sizeof creds, "x-access-token:%s", set.v[1].placeholder);
    char *enc = b64(creds);
    snprintf(
        line, sizeof line,
        "GET /repo.git/info/refs HTTP/1.1\r\nHost: git.test\r\nAuthorization: Basic %s\r\n\r\n",
        enc);
    struct sp_rewrite rw;
    assert_int_equal(sp_rewrite(&set, "git.test", line, strlen(line), &rw), 0);
    assert_null(rw.misused);
    char *want = b64("x-access-token:ghp_abc");
    char expect[256];
    snprintf(expect, sizeof expect, "Authorization: Basic %s\r\n", want);
    assert_non_null(strstr(rw.head, expect));
    assert_int_equal(rw.nused, 1);
    assert_string_equal(rw.used[0]->name, "GIT_TOKEN");
    sp_rewrite_free(&rw);
    /* toward another host: a misuse, even hidden in the credentials */
    assert_int_equal(sp_rewrite(&set, "evil.test", line, strlen(line), &rw), 0);
    assert_ptr_equal(rw.misused, &set.v[1]);
    assert_null(rw.head);
    /* credentials without a placeholder (or not base64) are left as they are */
    const char *plain = "GET / HTTP/1.1\r\nHost: git.test\r\nAuthorization: Basic dXNlcjpwYXNz\r\n"
                        "Proxy-Authorization: Basic !!!\r\n\r\n";
    assert_int_equal(sp_rewrite(&set, "git.test", plain, strlen(plain), &rw), 0);
    assert_string_equal(rw.head, plain);
    sp_rewrite_free(&rw);
    free(want);
    free(enc);
}

static void test_request_heads(void **state)
{
    (void)state;
    struct sp_request r;
    const char *ok = "POST /v1/x?key=secret#f HTTP/1.1\r\nHost: API.Model.test:443\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(sp_parse_request(ok, strlen(ok), &r), 0);
    assert_string_equal(r.method, "POST");
    assert_string_equal(r.path, "/v1/x");
    assert_string_equal(r.host, "api.model.test");
    assert_int_equal(r.body, SP_BODY_CHUNKED);
    assert_false(r.close);
    const char *h10 = "GET / HTTP/1.0\r\nContent-Length: 5\r\n\r\n";
    assert_int_equal(sp_parse_request(h10, strlen(h10), &r), 0);
    assert_int_equal(r.body, SP_BODY_LENGTH);
    assert_int_equal(r.length, 5);
    assert_true(r.close);
    /* Refused: both framings, two lengths, a folded line, two Hosts, not HTTP/1. */
    const char *bad[] = {
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(sp_parse_request(bad[i], strlen(bad[i]), &r), -1);
}

static void test_response_heads(void **state)
{
    (void)state;
    struct sp_response r;
    const char *sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(sp_parse_response(sse, strlen(sse), false, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body, SP_BODY_CHUNKED);
    const char *len = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n";
    assert_int_equal(sp_parse_response(len, strlen(len), false, &r), 0);
    assert_int_equal(r.body, SP_BODY_LENGTH);
    assert_int_equal(sp_parse_response(len, strlen(len), true, &r), 0);
    assert_int_equal(r.body, SP_BODY_NONE);
    const char *eof = "HTTP/1.1 200 OK\r\n\r\n";
    assert_int_equal(sp_parse_response(eof, strlen(eof), false, &r), 0);
    assert_int_equal(r.body, SP_BODY_UNTIL_CLOSE);
    assert_true(r.close);
    const char *cont = "HTTP/1.1 100 Continue\r\n\r\n";
    assert_int_equal(sp_parse_response(cont, strlen(cont), false, &r), 0);
    assert_int_equal(r.body, SP_BODY_NONE);
}

static void test_chunked(void **state)
{
    (void)state;
    const char body[] = "5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\n\r\n";
    const char next[] = "GET /next";
    char all[sizeof body + sizeof next];
    memcpy(all, body, sizeof body - 1);
    memcpy(all + sizeof body - 1, next, sizeof next);
    size_t blen = sizeof body - 1, total = blen + sizeof next - 1;
    /* Fed in pieces of every size, the end is found exactly where the body ends. */
    for (size_t step = 1; step <= total; step++) {
        struct sp_chunked c = {0};
        size_t at = 0;
        bool done = false;
        while (!done && at < total) {
            size_t n = total - at < step ? total - at : step;
            long used = sp_chunked_scan(&c, all + at, n, &done);
            assert_true(used >= 0);
            at += (size_t)used;
            if (!done)
                assert_int_equal((size_t)used, n);
        }
        assert_true(done);
        assert_int_equal(at, blen);
    }
    struct sp_chunked c = {0};
    bool done;
    assert_int_equal(sp_chunked_scan(&c, "zz\r\n", 4, &done), -1);
    c = (struct sp_chunked){0};
    assert_int_equal(sp_chunked_scan(&c, "3\r\nabcX", 7, &done), -1);
    assert_int_equal(sp_head_end("GET / HTTP/1.1\r\n\r\nrest", 22), 18);
    assert_int_equal(sp_head_end("GET / HTTP/1.1\r\n", 16), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replaced_for_its_hosts),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_foreign_placeholder),
        cmocka_unit_test(test_basic_auth),
        cmocka_unit_test(test_request_heads),
        cmocka_unit_test(test_response_heads),
        cmocka_unit_test(test_chunked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

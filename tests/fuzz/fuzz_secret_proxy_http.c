/*
 * fuzz_secret_proxy_http.c: libFuzzer target for what the brokering proxy reads
 * (worker/host/secret_proxy_http.c): request heads come from Sandboxes, response heads and chunked
 * bodies from upstreams. Whatever the bytes: no read past them; a head's end is inside them; a
 * rewrite either refuses (misuse, nothing written) or writes a head of the length it says, which
 * holds no placeholder of the set in a header toward a host the set does not allow; the chunked
 * scanner never consumes more than it is given, the same whether fed whole or byte by byte.
 * The first input byte picks the request's host.
 */
#include "fuzz_common.h"
#include "host/secret_proxy_http.h"

static struct secret_set set;

static void init_set(void)
{
    if (set.n)
        return;
    const char *a[] = {"api.model.test", "*.model.test"}, *b[] = {"git.test"};
    if (secret_set_add(&set, "MODEL_KEY", "sk-1", 4, a, 2) != 0 ||
        secret_set_add(&set, "GIT", "g", 1, b, 1) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    init_set();
    if (size == 0)
        return 0;
    static const char *const hosts[] = {"api.model.test", "eu.model.test", "git.test", "evil.test",
                                        ""};
    const char *host = hosts[data[0] % 5];
    /* Bytes "P0"/"P1" in the input stand for the set's placeholders, so that the fuzzer reaches
     * the replacement paths without guessing 50 random characters. */
    size_t cap = size * SECRET_PLACEHOLDER_LEN + 1, n = 0;
    char *in = malloc(cap);
    if (!in)
        abort();
    for (size_t i = 1; i < size; i++) {
        if (data[i] == 'P' && i + 1 < size && (data[i + 1] == '0' || data[i + 1] == '1')) {
            memcpy(in + n, set.v[data[i + 1] - '0'].placeholder, SECRET_PLACEHOLDER_LEN);
            n += SECRET_PLACEHOLDER_LEN;
            i++;
        } else {
            in[n++] = (char)data[i];
        }
    }
    char *buf = malloc(n ? n : 1); /* exactly n bytes: ASan sees a read past them */
    if (!buf)
        abort();
    memcpy(buf, in, n);
    free(in);

    size_t end = sp_head_end(buf, n);
    FUZZ_CHECK(end <= n);
    if (end) {
        struct sp_request rq;
        struct sp_response rs;
        (void)sp_parse_request(buf, end, &rq);
        (void)sp_parse_response(buf, end, data[0] & 1, &rs);
        struct sp_rewrite rw;
        if (sp_rewrite(&set, host, buf, end, &rw) == 0) {
            if (rw.misused) {
                FUZZ_CHECK(rw.head == NULL);
            } else {
                FUZZ_CHECK(rw.head && strlen(rw.head) <= rw.len);
                FUZZ_CHECK(rw.nused <= SP_MAX_USED);
                for (size_t k = 0; k < rw.nused; k++)
                    FUZZ_CHECK(secret_binding_allows_host(rw.used[k], host));
            }
            sp_rewrite_free(&rw);
        }
    }

    struct sp_chunked whole = {0}, bytes = {0};
    bool done_whole = false, done_bytes = false;
    long used_whole = sp_chunked_scan(&whole, buf, n, &done_whole);
    FUZZ_CHECK(used_whole <= (long)n);
    long used_bytes = 0;
    for (size_t i = 0; i < n && !done_bytes; i++) {
        long u = sp_chunked_scan(&bytes, buf + i, 1, &done_bytes);
        if (u < 0) {
            used_bytes = -1;
            break;
        }
        used_bytes += u;
    }
    if (used_whole >= 0 && used_bytes >= 0)
        FUZZ_CHECK(done_whole == done_bytes && (!done_whole || used_whole == used_bytes));
    free(buf);
    return 0;
}

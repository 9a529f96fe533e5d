/*
 * fuzz_route_query.c: libFuzzer target for request routing and query parameters. The input is
 * "METHOD\0PATH\0limit\0cursor\0wait" (missing parts are absent parameters). Routing must either
 * pick a route whose method and template match (parameters non-empty ids without '/') or answer
 * -1 with a well-formed Allow list; the query validators must accept exactly the documented
 * grammar (API.md: limit 1..200, cursor up to 18 digits, wait a whole number).
 */
#include "fuzz_common.h"
#include "gateway.h"
#include "json_input.h"

#include <stdbool.h>
#include <string.h>

/* Splits the input at NULs into at most n strings (pointers into a NUL-terminated copy). */
static size_t split(char *s, size_t size, const char **out, size_t n)
{
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= size && k < n; i++)
        if (s[i] == '\0') {
            out[k++] = s + start;
            start = i + 1;
        }
    return k;
}

static bool digits_only(const char *s, size_t maxdigits)
{
    size_t n = strlen(s);
    if (n == 0 || n > maxdigits)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static void check_route(const char *method, const char *path)
{
    char params[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN];
    char allow[128];
    int path_route = 7777;
    memset(params, 0x5a, sizeof params);
    int i = gateway_route_match(method, path, params, allow, sizeof allow, &path_route);
    FUZZ_CHECK(i >= -1 && i < gateway_route_count);
    FUZZ_CHECK(fuzz_terminated(allow, sizeof allow));
    if (i >= 0) {
        const struct route *rt = &gateway_routes[i];
        FUZZ_CHECK(strcmp(rt->method, method) == 0);
        /* Count the template's parameters; each must be a non-empty segment. */
        size_t np = 0;
        for (const char *t = rt->path; (t = strchr(t, '{')); t++)
            np++;
        for (size_t p = 0; p < np; p++) {
            FUZZ_CHECK(fuzz_terminated(params[p], ROUTE_PARAM_LEN));
            FUZZ_CHECK(params[p][0] != '\0' && !strchr(params[p], '/'));
            FUZZ_CHECK(strstr(path, params[p]) != NULL);
        }
        if (np == 0)
            FUZZ_CHECK(strcmp(rt->path, path) == 0);
    } else {
        FUZZ_CHECK(path_route >= -1 && path_route < gateway_route_count);
        FUZZ_CHECK((allow[0] == '\0') == (path_route == -1));
    }
}

static void check_query(const char *limit, const char *cursor, const char *wait)
{
    struct input_error e;
    size_t lim = 0;
    int64_t w = -1;
    memset(&e, 0, sizeof e);
    e.code = PROBLEM_CODE_COUNT; /* none: a failure must set one */
    bool ok = input_limit(limit, &lim, &e);
    if (!limit)
        FUZZ_CHECK(ok && lim == 50);
    else {
        bool want = digits_only(limit, 9) && atoll(limit) >= 1 && atoll(limit) <= 200;
        FUZZ_CHECK(ok == want);
        if (ok)
            FUZZ_CHECK(lim >= 1 && lim <= 200);
        else
            FUZZ_CHECK(e.code < PROBLEM_CODE_COUNT && fuzz_terminated(e.detail, sizeof e.detail));
    }
    FUZZ_CHECK(input_cursor(cursor, &e) == (!cursor || digits_only(cursor, 18)));
    ok = input_wait(wait, &w, &e);
    FUZZ_CHECK(ok == (!wait || digits_only(wait, 9)));
    if (ok)
        FUZZ_CHECK(w >= 0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    const char *part[5] = {NULL};
    size_t n = split(s, size, part, 5);
    if (n >= 2)
        check_route(part[0], part[1]);
    else if (n == 1)
        check_route("GET", part[0]);
    check_query(n > 2 ? part[2] : NULL, n > 3 ? part[3] : NULL, n > 4 ? part[4] : NULL);
    free(s);
    return 0;
}

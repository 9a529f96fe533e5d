/*
 * fuzz_idempotency_key.c: libFuzzer target for the Idempotency-Key and X-Request-Id header
 * validators: each must accept exactly its documented grammar (API.md: 1-255 visible ASCII
 * characters; 1-64 of [A-Za-z0-9._-]), compared here with an independent implementation.
 */
#include "fuzz_common.h"
#include "json_input.h"

#include <stdbool.h>

static bool idempotency_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static bool request_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    struct input_error e;
    memset(&e, 0, sizeof e);
    e.code = PROBLEM_CODE_COUNT; /* none: a failure must set one */
    bool ok = input_idempotency_key(s, &e);
    FUZZ_CHECK(ok == idempotency_ok(s));
    if (!ok)
        FUZZ_CHECK(e.code < PROBLEM_CODE_COUNT && fuzz_terminated(e.field, sizeof e.field) &&
                   fuzz_terminated(e.detail, sizeof e.detail));
    FUZZ_CHECK(input_request_id_ok(s) == request_id_ok(s));
    free(s);
    return 0;
}

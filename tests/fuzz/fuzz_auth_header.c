/*
 * fuzz_auth_header.c: libFuzzer target for the Authorization header: auth_bearer() must return
 * NULL or a non-empty token inside the header after "Bearer " and its spaces, and
 * auth_key_format_ok() must accept exactly "sbx_" + 43 base64url characters. The token is then
 * hashed as the gateway does before its constant-time compare.
 */
#include "auth.h"
#include "fuzz_common.h"

#include <strings.h>

static bool b64url(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static bool key_shape(const char *t)
{
    if (strlen(t) != AUTH_KEY_LEN || strncmp(t, AUTH_KEY_PREFIX, 4) != 0)
        return false;
    for (const char *p = t + 4; *p; p++)
        if (!b64url(*p))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *header = fuzz_cstr(data, size);
    const char *token = auth_bearer(header);
    if (token) {
        FUZZ_CHECK(strncasecmp(header, "Bearer ", 7) == 0);
        FUZZ_CHECK(token > header && token <= header + strlen(header));
        FUZZ_CHECK(*token != '\0' && *token != ' ');
        for (const char *p = header + 7; p < token; p++)
            FUZZ_CHECK(*p == ' ');
        FUZZ_CHECK(auth_key_format_ok(token) == key_shape(token));
        uint8_t hash[32];
        auth_hash(token, hash);
    } else {
        FUZZ_CHECK(strncasecmp(header, "Bearer ", 7) != 0 ||
                   header[7 + strspn(header + 7, " ")] == '\0');
    }
    FUZZ_CHECK(auth_key_format_ok(header) == key_shape(header));
    free(header);
    return 0;
}

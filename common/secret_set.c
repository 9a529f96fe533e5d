/*
 * secret_set.c: one Sandbox's secrets in memory (secret_set.h). Placeholders are random, so one
 * copied out of a Sandbox means nothing in any other.
 */
#include "secret_set.h"

#include "id.h"

#include <nettle/base64.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int placeholder_new(char out[SECRET_PLACEHOLDER_LEN + 1])
{
    uint8_t raw[32];
    char b64[BASE64_ENCODE_RAW_LENGTH(sizeof raw) + 1];
    if (random_bytes(raw, sizeof raw) != 0)
        return -1;
    base64_encode_raw(b64, sizeof raw, raw);
    /* base64url without its padding: the placeholder is one token to shells and headers. */
    for (size_t i = 0; i < 43; i++)
        b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
    size_t n = strlen(SECRET_PLACEHOLDER_PREFIX);
    memcpy(out, SECRET_PLACEHOLDER_PREFIX, n);
    memcpy(out + n, b64, 43);
    out[n + 43] = '\0';
    return 0;
}

static void binding_clear(struct secret_binding *b)
{
    if (b->value) {
        explicit_bzero(b->value, b->value_len);
        free(b->value);
    }
    for (size_t i = 0; i < b->n_hosts; i++)
        free(b->hosts[i]);
    free(b->hosts);
    free(b->name);
    explicit_bzero(b->placeholder, sizeof b->placeholder);
    memset(b, 0, sizeof *b);
}

int secret_set_add(struct secret_set *s, const char *name, const void *value, size_t value_len,
                   const char *const *hosts, size_t n_hosts)
{
    struct secret_binding b = {0};
    b.name = strdup(name);
    b.value = malloc(value_len ? value_len : 1);
    b.hosts = calloc(n_hosts ? n_hosts : 1, sizeof *b.hosts);
    if (!b.name || !b.value || !b.hosts)
        goto fail;
    memcpy(b.value, value, value_len);
    b.value_len = value_len;
    for (; b.n_hosts < n_hosts; b.n_hosts++) {
        b.hosts[b.n_hosts] = strdup(hosts[b.n_hosts]);
        if (!b.hosts[b.n_hosts])
            goto fail;
        for (char *c = b.hosts[b.n_hosts]; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    }
    if (placeholder_new(b.placeholder) != 0)
        goto fail;
    struct secret_binding *v = realloc(s->v, (s->n + 1) * sizeof *v);
    if (!v)
        goto fail;
    s->v = v;
    s->v[s->n++] = b;
    return 0;
fail:
    binding_clear(&b);
    return -1;
}

void secret_set_clear(struct secret_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        binding_clear(&s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

const struct secret_binding *secret_set_find_placeholder(const struct secret_set *s, const char *p,
                                                         size_t len)
{
    if (len != SECRET_PLACEHOLDER_LEN)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        if (memcmp(s->v[i].placeholder, p, len) == 0)
            return &s->v[i];
    return NULL;
}

bool secret_binding_allows_host(const struct secret_binding *b, const char *host)
{
    size_t hl = strlen(host);
    for (size_t i = 0; i < b->n_hosts; i++) {
        const char *pat = b->hosts[i];
        if (strncmp(pat, "*.", 2) == 0) {
            size_t sl = strlen(pat + 1); /* ".example.org" */
            if (hl > sl && strcasecmp(host + hl - sl, pat + 1) == 0)
                return true;
        } else if (strcasecmp(host, pat) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * id.c: random identifiers and secrets. Ids carry a type prefix so that a log line or a support
 * ticket says what an id is; their random part makes them unguessable across Apps. Message ids
 * start with their time instead (id_new_ordered) so that inserts stay on the right edge of the
 * B-trees keyed on them.
 */
#include "id.h"
#include "clock.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* In ASCII order, so that the ids of id_new_ordered() sort as their times do. */
static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

int id_new(const char *prefix, char *out, size_t outlen)
{
    size_t plen = strlen(prefix);
    uint8_t rnd[20];

    if (outlen < plen + 22) {
        errno = ENOSPC;
        return -1;
    }
    if (random_bytes(rnd, sizeof rnd) != 0)
        return -1;
    memcpy(out, prefix, plen);
    out[plen] = '_';
    for (size_t i = 0; i < 20; i++)
        out[plen + 1 + i] = alphabet[rnd[i] & 31];
    out[plen + 21] = '\0';
    return 0;
}

int id_new_ordered(const char *prefix, char *out, size_t outlen)
{
    size_t plen = strlen(prefix);

    if (id_new(prefix, out, outlen) != 0)
        return -1;
    uint64_t ms = (uint64_t)clock_wall_ms();
    for (int i = 8; i >= 0; i--) {
        out[plen + 1 + i] = alphabet[ms & 31];
        ms >>= 5;
    }
    return 0;
}

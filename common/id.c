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
#include <unistd.h>

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

/* The random part of ids, from a per-thread buffer filled by one getrandom() per 512 bytes (25
 * ids) instead of one call per id: the gateway makes two ids per enqueue. It is the kernel's
 * CSPRNG output all the same, handed out once each; a child process (its pid differs) never
 * reuses what its parent had buffered. Secrets (auth_new_secret) read random_bytes directly. */
static int id_random(uint8_t *out, size_t len)
{
    static __thread uint8_t buf[512];
    static __thread size_t left;
    static __thread pid_t owner;
    pid_t me = getpid();
    if (owner != me) {
        owner = me;
        left = 0;
    }
    if (len > sizeof buf)
        return random_bytes(out, len);
    if (left < len) {
        if (random_bytes(buf, sizeof buf) != 0)
            return -1;
        left = sizeof buf;
    }
    memcpy(out, buf + sizeof buf - left, len);
    memset(buf + sizeof buf - left, 0, len);
    left -= len;
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
    if (id_random(rnd, sizeof rnd) != 0)
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

/*
 * host_tag.c: installation-tagged names of Sandbox host directories (host_tag.h).
 * Hidden state: the installation id (tag), written once at worker start-up.
 */
#include "host/host_tag.h"
#include "installation.h"

#include <stdio.h>
#include <string.h>

static char tag[INSTALLATION_ID_LEN];

void host_tag_set(const char *installation_id)
{
    snprintf(tag, sizeof tag, "%s", installation_id ? installation_id : "");
}

const char *host_tag_installation(void)
{
    return tag;
}

int host_tag_name(const char *sandbox_id, char *out, size_t outlen)
{
    int n = tag[0] ? snprintf(out, outlen, "%s-%s", tag, sandbox_id)
                   : snprintf(out, outlen, "%s", sandbox_id);
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* Sandbox ids are "sbx_" and [a-z0-9] (id.h); the firecracker jailer spells the "_" as "-". */
static int sandbox_id_of(const char *s, char *out, size_t len)
{
    if ((strncmp(s, "sbx_", 4) != 0 && strncmp(s, "sbx-", 4) != 0) || !s[4] || strlen(s) >= len)
        return -1;
    for (const char *p = s + 4; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
            return -1;
    snprintf(out, len, "sbx_%s", s + 4);
    return 0;
}

enum host_tag_owner host_tag_owner(const char *name, char *sandbox_id, size_t len)
{
    if (sandbox_id_of(name, sandbox_id, len) == 0)
        return HOST_TAG_LEGACY;
    const char *dash = strchr(name, '-');
    size_t n = strlen(tag);
    if (!dash || n == 0 || (size_t)(dash - name) != n || strncmp(name, tag, n) != 0)
        return HOST_TAG_OTHERS;
    return sandbox_id_of(dash + 1, sandbox_id, len) == 0 ? HOST_TAG_OURS : HOST_TAG_OTHERS;
}

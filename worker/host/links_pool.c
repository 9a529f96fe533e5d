/*
 * links_pool.c: the address pool of Sandbox links (links.h): net_pool cut into /30 slots, a slot's
 * interface name and addresses, and where a search for a free slot starts.
 */
#include "host/links_internal.h"

#include "clock.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- pool and slots ---- */

int net_pool_parse(const char *cidr, struct net_pool *out, char *err, size_t errlen)
{
    char addr[INET_ADDRSTRLEN];
    const char *slash = strchr(cidr, '/');
    if (!slash || (size_t)(slash - cidr) >= sizeof(addr))
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len", cidr);
    memcpy(addr, cidr, (size_t)(slash - cidr));
    addr[slash - cidr] = '\0';
    char *end;
    long len = strtol(slash + 1, &end, 10);
    if (*end || len < 8 || len > 30 || inet_pton(AF_INET, addr, &out->net) != 1)
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len with len 8..30", cidr);
    if (ntohl(out->net.s_addr) & ~(~0u << (32 - len)))
        return fail(err, errlen, "net_pool \"%s\": host bits set", cidr);
    out->len = (int)len;
    out->slots = 1u << (30 - len);
    return 0;
}

void link_for_slot(const struct net_pool *pool, uint32_t slot, const char *sandbox_id,
                   struct net_link *out)
{
    memset(out, 0, sizeof(*out));
    if (sandbox_id)
        snprintf(out->sandbox_id, sizeof(out->sandbox_id), "%s", sandbox_id);
    snprintf(out->ifname, sizeof(out->ifname), FW_IFNAME_PREFIX "%u", slot);
    out->slot = slot;
    uint32_t base = ntohl(pool->net.s_addr) + slot * 4;
    out->host_addr.s_addr = htonl(base + 1);
    out->sandbox_addr.s_addr = htonl(base + 2);
    out->prefix_len = 30;
}

/* The slot of "sbx<digits>", or -1 for any other name. */
long slot_of_ifname(const char *name)
{
    size_t p = strlen(FW_IFNAME_PREFIX);
    if (strncmp(name, FW_IFNAME_PREFIX, p) != 0 || !name[p])
        return -1;
    char *end;
    long slot = strtol(name + p, &end, 10);
    return *end || slot < 0 ? -1 : slot;
}

void net_link_sandbox_address(const struct net_link *link, char *out, size_t outlen)
{
    if (!inet_ntop(AF_INET, &link->sandbox_addr, out, (socklen_t)outlen) && outlen)
        out[0] = '\0';
}

struct fw_sandbox net_link_fw(const struct net_link *link)
{
    return (struct fw_sandbox){link->sandbox_id, link->ifname, link->sandbox_addr};
}

/* Probing starts at a random slot so that a slot just freed is not handed out again at once. */
uint32_t first_probe(const struct net_pool *pool)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    return r % pool->slots;
}

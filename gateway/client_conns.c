/*
 * client_conns.c: the per-client connection limit (see client_conns.h).
 */
#include "client_conns.h"
#include "client_addr.h"
#include "log.h"
#include "clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CC_BUCKETS 1024

/* One address with open connections; freed when its last one closes. */
struct cc_entry {
    char addr[CLIENT_ADDR_LEN];
    int64_t open;
    struct cc_entry *next;
};

struct client_conns {
    pthread_mutex_t lock;
    int64_t per_client;
    const struct trusted_proxies *exempt;
    uint64_t refused;
    int64_t last_warn_ms;
    struct cc_entry *buckets[CC_BUCKETS];
};

struct client_conns *client_conns_new(int64_t per_client, const struct trusted_proxies *exempt)
{
    struct client_conns *cc = calloc(1, sizeof *cc);
    if (!cc)
        return NULL;
    pthread_mutex_init(&cc->lock, NULL);
    cc->per_client = per_client;
    cc->exempt = exempt;
    return cc;
}

void client_conns_free(struct client_conns *cc)
{
    if (!cc)
        return;
    for (size_t i = 0; i < CC_BUCKETS; i++)
        while (cc->buckets[i]) {
            struct cc_entry *e = cc->buckets[i];
            cc->buckets[i] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&cc->lock);
    free(cc);
}

/* The address as text (IPv4-mapped IPv6 as IPv4); false for other families. */
static bool addr_text(const struct sockaddr *sa, char out[CLIENT_ADDR_LEN])
{
    if (sa->sa_family == AF_INET)
        return inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
                         CLIENT_ADDR_LEN) != NULL;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6))
        return inet_ntop(AF_INET, &a6->s6_addr[12], out, CLIENT_ADDR_LEN) != NULL;
    return inet_ntop(AF_INET6, a6, out, CLIENT_ADDR_LEN) != NULL;
}

static struct cc_entry **cc_slot(struct client_conns *cc, const char *addr)
{
    uint32_t h = 2166136261u;
    for (const char *p = addr; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    struct cc_entry **e = &cc->buckets[h % CC_BUCKETS];
    while (*e && strcmp((*e)->addr, addr) != 0)
        e = &(*e)->next;
    return e;
}

enum MHD_Result client_conns_accept(void *cls, const struct sockaddr *sa, socklen_t len)
{
    struct client_conns *cc = cls;
    char addr[CLIENT_ADDR_LEN];
    bool refuse = false;
    (void)len;
    if (!cc || !addr_text(sa, addr) || trusted_proxies_match(cc->exempt, addr))
        return MHD_YES;
    pthread_mutex_lock(&cc->lock);
    struct cc_entry *e = *cc_slot(cc, addr);
    if (e && e->open >= cc->per_client) {
        refuse = true;
        cc->refused++;
        int64_t now = clock_mono_ms();
        if (now - cc->last_warn_ms >= 10000) {
            cc->last_warn_ms = now;
            log_warn("http: refusing connections from %s: it holds %lld (conn_per_client); "
                     "%llu refused so far",
                     addr, (long long)e->open, (unsigned long long)cc->refused);
        }
    }
    pthread_mutex_unlock(&cc->lock);
    return refuse ? MHD_NO : MHD_YES;
}

void client_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code)
{
    struct client_conns *cc = cls;
    if (!cc)
        return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        char addr[CLIENT_ADDR_LEN];
        *socket_context = NULL;
        if (!ci || !ci->client_addr || !addr_text(ci->client_addr, addr) ||
            trusted_proxies_match(cc->exempt, addr))
            return;
        pthread_mutex_lock(&cc->lock);
        struct cc_entry **slot = cc_slot(cc, addr);
        if (!*slot && (*slot = calloc(1, sizeof **slot)) != NULL)
            memcpy((*slot)->addr, addr, sizeof addr);
        if (*slot) {
            (*slot)->open++;
            *socket_context = *slot;
        }
        pthread_mutex_unlock(&cc->lock);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        struct cc_entry *e = *socket_context;
        pthread_mutex_lock(&cc->lock);
        if (--e->open == 0) {
            struct cc_entry **slot = cc_slot(cc, e->addr);
            *slot = e->next;
            free(e);
        }
        pthread_mutex_unlock(&cc->lock);
        *socket_context = NULL;
    }
}

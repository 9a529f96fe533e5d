/*
 * secret_proxy.h: the brokering egress proxy (docs/secrets.md). The firewall redirects the TCP 80
 * and 443 egress of the Sandboxes of Apps with secrets to this proxy on the host. It learns where
 * each connection was going (SO_ORIGINAL_DST) and which Sandbox sent it (the lookup), terminates
 * TLS with a certificate for the SNI name issued by the installation CA (one per name, cached),
 * opens TLS to the original destination verified against the host's CA store and
 * upstream_ca_file, and relays HTTP/1.1, replacing each of the Sandbox's placeholders in request
 * headers by its value, for its secret's hosts only. A placeholder toward any other host is a
 * misuse: the request is refused (403) and reported. Responses stream through as they come.
 *
 * A thread of its own accepts, and one thread serves each connection (blocking I/O: a connection
 * is a sequence of requests and streamed answers). Connections are bounded per Sandbox and in
 * all; past a bound a connection is closed at once. No store and no event loop here: what each
 * request was is handed to the caller's report callback, on the connection's thread.
 */
#ifndef SBX_SECRET_PROXY_H
#define SBX_SECRET_PROXY_H

#include "pki.h"
#include "secret_set.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRET_PROXY_ID_LEN 64
#define SECRET_PROXY_MAX_PER_SANDBOX 32
#define SECRET_PROXY_MAX_TOTAL 512

/* Which Sandbox has the address peer, and its secrets: fills sandbox_id, app_id and *copy (a
 * deep copy the proxy owns and clears with secret_set_clear; the placeholders kept). 0, or -1
 * when peer is no Sandbox with secrets (the connection is closed). Called on the proxy's
 * threads: it must be thread-safe (struct secret_proxy_registry below is). */
typedef int (*secret_proxy_lookup_fn)(void *arg, struct in_addr peer,
                                      char sandbox_id[SECRET_PROXY_ID_LEN],
                                      char app_id[SECRET_PROXY_ID_LEN], struct secret_set *copy);

enum secret_proxy_kind {
    SECRET_PROXY_REQUEST, /* a brokered request (a placeholder replaced), or its failure */
    SECRET_PROXY_MISUSE,  /* a placeholder toward a host that is not its secret's: refused */
};

/* One request, for the audit trail: never a header value nor a body. */
struct secret_proxy_record {
    enum secret_proxy_kind kind;
    char sandbox_id[SECRET_PROXY_ID_LEN];
    char app_id[SECRET_PROXY_ID_LEN];
    char secrets[256]; /* the secrets' names, comma-separated */
    char host[256];    /* the name the request was for (SNI, else Host) */
    struct in_addr destination;
    uint16_t port;
    char method[16];
    char path[512]; /* without the query */
    int status;     /* the answer's, or the proxy's own (403, 502) */
    uint64_t bytes_up, bytes_down;
    int64_t duration_ms;
    char error[160]; /* why the proxy answered itself ("" otherwise) */
};

struct secret_proxy_params {
    struct in_addr listen;        /* INADDR_ANY for every address of the host */
    uint16_t port;                /* 0: a free port (secret_proxy_port) */
    struct pki *pki;              /* issues the certificates shown to Sandboxes */
    const char *upstream_ca_file; /* added to the host's CA store for upstreams; NULL or "" */
    bool no_system_ca;            /* tests: trust upstream_ca_file only */
    size_t max_per_sandbox;       /* 0: SECRET_PROXY_MAX_PER_SANDBOX */
    size_t max_total;             /* 0: SECRET_PROXY_MAX_TOTAL */
    int idle_ms; /* a Sandbox's connection idle this long between requests closes; 0: 120 s (an
                  * upstream may keep silent 10 minutes, or idle_ms if longer) */
    secret_proxy_lookup_fn lookup;
    void *lookup_arg;
    void (*report)(const struct secret_proxy_record *r, void *arg); /* may be NULL */
    void *report_arg;
};

struct secret_proxy;

/* Binds and starts accepting. NULL with the reason. */
struct secret_proxy *secret_proxy_start(const struct secret_proxy_params *p, char *err,
                                        size_t errlen);
uint16_t secret_proxy_port(const struct secret_proxy *sp);
/* Stops accepting, closes every connection and waits for their threads. */
void secret_proxy_stop(struct secret_proxy *sp);

struct secret_proxy_stats {
    uint64_t connections, refused_bound, requests, brokered, misuses, upstream_failures;
};
void secret_proxy_stats(struct secret_proxy *sp, struct secret_proxy_stats *out);

/* A thread-safe table from a Sandbox's address to its ids and secrets: the worker puts a
 * Sandbox's set at activation and removes it when the Sandbox ends; secret_proxy_registry_lookup
 * is a secret_proxy_lookup_fn (arg: the registry). */
struct secret_proxy_registry;
struct secret_proxy_registry *secret_proxy_registry_new(void);
void secret_proxy_registry_free(struct secret_proxy_registry *r);
/* Copies set (values and placeholders). Replaces what addr had. 0, or -1 (ENOMEM). */
int secret_proxy_registry_put(struct secret_proxy_registry *r, struct in_addr addr,
                              const char *sandbox_id, const char *app_id,
                              const struct secret_set *set);
void secret_proxy_registry_remove(struct secret_proxy_registry *r, struct in_addr addr);
int secret_proxy_registry_lookup(void *registry, struct in_addr peer,
                                 char sandbox_id[SECRET_PROXY_ID_LEN],
                                 char app_id[SECRET_PROXY_ID_LEN], struct secret_set *copy);

/* A deep copy of src into *dst (empty before), placeholders kept. 0, or -1 (ENOMEM: dst empty). */
int secret_set_copy(struct secret_set *dst, const struct secret_set *src);

#endif

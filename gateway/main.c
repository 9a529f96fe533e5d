/*
 * main.c: the sbx-gateway daemon: reads the configuration, opens the store and the installation's
 * keys (made at first start), does the first-start bootstrap (admin token, echo App and key,
 * printed once), serves HTTP (HTTPS with tls_cert_file) with libmicrohttpd's thread pool until
 * SIGINT or SIGTERM, then parks no request and stops cleanly. SIGHUP reloads the TLS certificate
 * and key.
 */
#include "auth.h"
#include "client_addr.h"
#include "client_conns.h"
#include "clock.h"
#include "config.h"
#include "gateway.h"
#include "key_cache.h"
#include "log.h"
#include "longpoll.h"
#include "sse.h"
#include "metrics.h"
#include "notify.h"
#include "pki.h"
#include "secret_box.h"
#include "store.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <nettle/base16.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct store_ctx gateway_ctx = {"gateway", NULL};

static void usage(FILE *out)
{
    fprintf(out, "usage: sbx-gateway [--config FILE] [--SETTING VALUE ...]\n\n"
                 "The sbx REST gateway. Settings (flag > environment > file > default):\n\n");
    config_print_reference(out);
}

/* Lowercase hex of a 32-byte hash; out holds 65 bytes. */
static void hex_encode(const uint8_t hash[32], char *out)
{
    base16_encode_update(out, 32, hash);
    out[BASE16_ENCODE_LENGTH(32)] = '\0';
}

static int hex_decode(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return strlen(hex) == 2 * n ? 0 : -1;
}

/* conn_limit is only real if the process may hold that many sockets: raise the soft file limit
 * towards it (up to the hard limit), and say so when the hard limit is lower. */
static void raise_fd_limit(int64_t conn_limit)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)conn_limit + 128;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        log_warn("open files limited to %llu: fewer than conn_limit %lld connections will be "
                 "accepted (raise the hard limit, e.g. LimitNOFILE=)",
                 (unsigned long long)rl.rlim_cur, (long long)conn_limit);
}

/* The admin token: the configured one (its hash replaces any stored one), else the stored hash,
 * else a new token, printed once. */
static int bootstrap_admin(struct gateway *gw)
{
    struct store *st = gw->st;
    char hex[80], token[96], stored[80];
    enum store_status s;

    if (gw->cfg.admin_token[0]) {
        auth_hash(gw->cfg.admin_token, gw->admin_hash);
        hex_encode(gw->admin_hash, hex);
        return store_setting_put(st, "admin_token_sha256", hex) == STORE_OK ? 0 : -1;
    }
    s = store_setting_get(st, "admin_token_sha256", hex, sizeof hex);
    if (s == STORE_OK)
        return hex_decode(hex, gw->admin_hash, 32);
    if (s != STORE_NOT_FOUND || auth_new_secret(AUTH_ADMIN_PREFIX, token, sizeof token) != 0)
        return -1;
    auth_hash(token, gw->admin_hash);
    hex_encode(gw->admin_hash, hex);
    /* Another gateway starting on the same empty database at this moment may store its own
     * token first: then that one is the admin token, and this one is never shown. */
    if (store_setting_init(st, "admin_token_sha256", hex, stored, sizeof stored) != STORE_OK)
        return -1;
    if (strcmp(stored, hex) != 0) {
        memset(token, 0, sizeof token);
        log_info("the admin token was set by another gateway at the same time; it is that one");
        return hex_decode(stored, gw->admin_hash, 32);
    }
    printf("sbx: admin token (shown once, only its hash is stored):\n    %s\n", token);
    fflush(stdout);
    memset(token, 0, sizeof token);
    return 0;
}

/* On the very first start: an "echo" App and a key for it, so that curl works right away. */
static int bootstrap_echo_app(struct gateway *gw, const char *base_url)
{
    struct store *st = gw->st;
    char done[16], secret[80], prefix[AUTH_KEY_SHOWN_PREFIX + 1], next[STORE_CURSOR_LEN];
    struct store_app *apps, app = {0};
    struct store_key key;
    uint8_t hash[32];
    size_t n;

    if (store_setting_get(st, "bootstrap_echo_app", done, sizeof done) == STORE_OK)
        return 0;
    if (store_app_list(st, "", 1, &apps, &n, next) != STORE_OK)
        return -1;
    store_app_list_free(apps, n);
    if (n == 0) {
        store_app_defaults(&app, "echo", gw->cfg.driver);
        app.command_json = strdup("[\"/usr/bin/sbx-echo-agent\"]");
        if (!app.command_json || store_app_create(st, &gateway_ctx, &app) != STORE_OK) {
            store_app_clear(&app);
            return -1;
        }
        store_app_clear(&app);
        if (auth_new_secret(AUTH_KEY_PREFIX, secret, sizeof secret) != 0)
            return -1;
        snprintf(prefix, sizeof prefix, "%.*s", AUTH_KEY_SHOWN_PREFIX, secret);
        auth_hash(secret, hash);
        if (store_key_create(st, &gateway_ctx, app.id, "bootstrap", prefix, hash, &key) != STORE_OK)
            return -1;
        printf("sbx: App \"echo\" (%s) created with an API key (shown once):\n"
               "    KEY=%s\n"
               "sbx: try it:\n"
               "    curl -s -H \"Authorization: Bearer $KEY\" -H 'Content-Type: application/json' "
               "-d '{}' %s/v1/sessions\n"
               "    curl -s -H \"Authorization: Bearer $KEY\" -H 'Content-Type: application/json' "
               "-d '{\"body\":{\"hello\":\"world\"}}' %s/v1/sessions/$SID/messages\n"
               "    curl -s -H \"Authorization: Bearer $KEY\" "
               "\"%s/v1/sessions/$SID/messages/$MID?wait=10\"\n",
               app.id, secret, base_url, base_url, base_url);
        fflush(stdout);
        memset(secret, 0, sizeof secret);
    }
    return store_setting_put(st, "bootstrap_echo_app", "1") == STORE_OK ? 0 : -1;
}

static int parse_listen(const char *listen, struct sockaddr_storage *sa, char *host, size_t hostlen)
{
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM},
                    *res;
    if (!colon || colon == listen)
        return -1;
    size_t len = (size_t)(colon - listen);
    if (listen[0] == '[' && len >= 2 && listen[len - 1] == ']')
        snprintf(host, hostlen, "%.*s", (int)len - 2, listen + 1);
    else
        snprintf(host, hostlen, "%.*s", (int)len, listen);
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return -1;
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    /* libmicrohttpd says this for every failed TLS handshake: plain HTTP, an old TLS version, a
     * scanner. One line per client would let anyone fill the log: a count, at most every 10 s. */
    if (strstr(msg, "handshake message out of context")) {
        static uint64_t failed;
        static int64_t last_ms = -10000;
        uint64_t total = __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
        int64_t now = clock_mono_ms(), last = __atomic_load_n(&last_ms, __ATOMIC_RELAXED);
        if (now - last >= 10000 && __atomic_compare_exchange_n(&last_ms, &last, now, false,
                                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            log_warn("http: a TLS handshake failed (a client speaking plain HTTP or TLS older than "
                     "1.2?); %llu so far",
                     (unsigned long long)total);
        return;
    }
    log_warn("http: %s", msg);
}

/* A listener on sa with threads HTTP threads and up to conn_limit connections, at most
 * conn_per_client of them from one client address when conns is given; HTTPS with the pair of
 * tls.h when https; or NULL. */
static struct MHD_Daemon *start_listener(struct gateway *gw, const struct sockaddr_storage *sa,
                                         unsigned threads, unsigned conn_limit,
                                         struct client_conns *conns, bool https)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    /* The certificate comes from a callback at each handshake, not from memory given once: a
     * reload (SIGHUP) changes what new connections get without restarting the listener. */
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)tls_cert_callback},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL},
    };
    if (sa->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (https)
        flags |= MHD_USE_TLS;
    /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: with SO_REUSEPORT a second gateway started on the
     * same port would silently share its connections (with another data directory, perhaps).
     * The per-connection pool is http_conn_memory, smaller than MHD's 32 KiB: a queued response
     * (an open stream) keeps about half of it resident (docs/performance.md, streaming). */
    return MHD_start_daemon(
        /* The logger first: libmicrohttpd logs through its own until it sees this option. */
        flags, 0, conns ? client_conns_accept : NULL, conns, gateway_access_handler, gw,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_NOTIFY_CONNECTION,
        conns ? client_conns_notify : NULL, conns, MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *)sa, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, conn_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)gw->cfg.conn_timeout, MHD_OPTION_NOTIFY_COMPLETED, gateway_request_completed, gw,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)gw->cfg.http_conn_memory, MHD_OPTION_ARRAY,
        https ? tls_opts : tls_opts + 2, MHD_OPTION_END);
}

/* SIGHUP: the TLS pair is read again; a pair that does not load keeps the one in use. */
static void reload(const struct gateway *gw)
{
    char msg[1200];
    if (!gw->cfg.tls_cert_file[0]) {
        log_info("SIGHUP: nothing to reload (no tls_cert_file)");
        return;
    }
    int r = tls_reload(msg, sizeof msg);
    if (r < 0)
        log_error("TLS: the new certificate is refused, connections keep getting the one in use: "
                  "%s",
                  msg);
    else if (r == 0)
        log_info("TLS: %s and %s are unchanged", gw->cfg.tls_cert_file, gw->cfg.tls_key_file);
    else
        log_info("TLS: new connections get %s", msg);
}

static unsigned listener_port(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/* The committer's wake-ups with the claim that overlaps the fsync: "queue" once the batch is
 * visible, "durable" once it is synced, if a worker waits for that. */
static void batch_progress(void *arg, bool durable)
{
    struct gateway *gw = arg;
    notify_send(gw->workers, durable ? "durable" : "queue");
}

/* claim_overlap on a SQLite store whose 202 means on disk; otherwise a watermark an earlier
 * gateway left is settled, so that no worker waits for it. */
static int setup_claim_overlap(struct gateway *gw, const char *run_dir)
{
    char err[512];
    bool sqlite = !gw->cfg.store[0] || strcmp(gw->cfg.store, "sqlite") == 0;
    if (!sqlite)
        return 0;
    if (!gw->cfg.claim_overlap || strcmp(gw->cfg.synchronous, "FULL") != 0) {
        if (store_enqueue_settle_watermark(gw->cfg.db_path, run_dir) != 0) {
            log_error("cannot sync %s's WAL: %m", gw->cfg.db_path);
            return -1;
        }
        return 0;
    }
    if (store_enqueue_overlap(gw->st, gw->cfg.db_path, run_dir, batch_progress, gw, err,
                              sizeof err) != 0) {
        log_error("claim_overlap: %s", err);
        return -1;
    }
    gw->claim_overlap = true;
    return 0;
}

int main(int argc, char **argv)
{
    struct gateway gw;
    char err[1024], run_dir[600], host[128], metrics_host[128], base_url[200];
    struct sockaddr_storage sa, metrics_sa;
    sigset_t sigs;
    int sig, rc = 1;

    memset(&gw, 0, sizeof gw);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    }
    if (config_load(&gw.cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "sbx-gateway: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (argv[i]) {
            fprintf(stderr, "sbx-gateway: unknown argument \"%s\" (see --help)\n", argv[i]);
            return 2;
        }
    }
    log_init("gateway", gw.cfg.log_level);
    raise_fd_limit(gw.cfg.conn_limit);

    /* Every thread started from here on inherits this mask: only sigwait() below sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (parse_listen(gw.cfg.listen, &sa, host, sizeof host) != 0) {
        fprintf(stderr, "sbx-gateway: listen must be host:port with a numeric host, not \"%s\"\n",
                gw.cfg.listen);
        return 2;
    }
    if (gw.cfg.metrics_listen[0] &&
        parse_listen(gw.cfg.metrics_listen, &metrics_sa, metrics_host, sizeof metrics_host) != 0) {
        fprintf(stderr,
                "sbx-gateway: metrics_listen must be host:port with a numeric host, not \"%s\"\n",
                gw.cfg.metrics_listen);
        return 2;
    }
    /* A pair that does not load is a start error: serving plain HTTP instead, or nothing on a
     * handshake, would not be what was configured. */
    bool https = gw.cfg.tls_cert_file[0] != '\0';
    if (https && (!MHD_is_feature_supported(MHD_FEATURE_TLS) ||
                  !MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK))) {
        fprintf(stderr, "sbx-gateway: tls_cert_file is set but this libmicrohttpd has no TLS "
                        "with a certificate callback\n");
        return 2;
    }
    if (https && tls_open(gw.cfg.tls_cert_file, gw.cfg.tls_key_file, err, sizeof err) != 0) {
        fprintf(stderr, "sbx-gateway: %s\n", err);
        return 2;
    }
    if (!(gw.proxies = trusted_proxies_parse(gw.cfg.trusted_proxies, err, sizeof err))) {
        fprintf(stderr, "sbx-gateway: %s\n", err);
        tls_close();
        return 2;
    }
    snprintf(run_dir, sizeof run_dir, "%s/run", gw.cfg.data_dir);
    if (config_make_data_dirs(&gw.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "sbx-gateway: %s\n", err);
        trusted_proxies_free(gw.proxies);
        tls_close();
        return 1;
    }
    gw.st = store_open(gw.cfg.store, gw.cfg.db_path, (int)gw.cfg.busy_timeout_ms,
                       gw.cfg.synchronous, err, sizeof err);
    if (!gw.st) {
        fprintf(stderr, "sbx-gateway: %s\n", err);
        trusted_proxies_free(gw.proxies);
        tls_close();
        return 1;
    }
    /* The keys are the installation's, shared with every host: made here at first start, and
     * never made anew when the directory is damaged (pki.h). */
    if (pki_open(gw.cfg.ca_dir, &gw.pki, err, sizeof err) != 0) {
        log_error("cannot open the installation's keys: %s", err);
        goto out;
    }
    int box = secret_box_open_config(&gw.cfg, &gw.secrets, err, sizeof err);
    if (box < 0) {
        log_error("cannot open the key of App secrets: %s", err);
        goto out;
    }
    if (box > 0)
        log_warn("no key for App secrets (%s): putting a secret answers 500", err);
    if (bootstrap_admin(&gw) != 0) {
        log_error("cannot set up the admin token in the store");
        goto out;
    }
    gw.workers = notify_peer_new(gw.cfg.store, run_dir, "worker");
    gw.gateways = notify_peer_new(gw.cfg.store, run_dir, "gateway");
    if (gw.workers && setup_claim_overlap(&gw, run_dir) != 0)
        goto out;
    gw.keys = key_cache_new(gw.cfg.auth_cache_ms);
    gw.metrics = metrics_new();
    gw.rl = ratelimit_new(gw.cfg.auth_fail_limit, gw.cfg.auth_fail_window * 1000);
    gw.rl_prefix = ratelimit_new(gw.cfg.auth_fail_limit, gw.cfg.auth_fail_window * 1000);
    gw.conns = client_conns_new(gw.cfg.conn_per_client, gw.proxies);
    gw.lp = longpoll_start(&gw, err, sizeof err);
    if (!gw.workers || !gw.gateways || !gw.keys || !gw.metrics || !gw.rl || !gw.rl_prefix ||
        !gw.conns || !gw.lp) {
        log_error("cannot start: %s", gw.lp ? "out of memory" : err);
        goto out;
    }
    gw.sse = sse_start(&gw, err, sizeof err);
    if (!gw.sse) {
        log_error("cannot start: %s", err);
        goto out;
    }

    if (gw.cfg.metrics_token[0])
        auth_hash(gw.cfg.metrics_token, gw.metrics_hash);
    /* The metrics listener first: once the API listener runs, /metrics is refused there. It
     * stays plain HTTP: it is meant for an address only the scraper reaches (docs/gateway.md). */
    if (gw.cfg.metrics_listen[0]) {
        gw.metrics_daemon = start_listener(&gw, &metrics_sa, 0, 64, NULL, false); /* one thread */
        if (!gw.metrics_daemon) {
            log_error("cannot listen for /metrics on %s (in use, or not an address of this host?)",
                      gw.cfg.metrics_listen);
            goto out;
        }
        log_info("/metrics served on %s:%u", metrics_host, listener_port(gw.metrics_daemon));
    }
    /* More threads than CPUs only switch between one another: a thread never waits for the
     * store (an enqueue is suspended until its commit, a long poll parked). */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (gw.cfg.http_threads == 0)
        gw.cfg.http_threads = cpus > 0 ? cpus : 2;
    struct MHD_Daemon *d = start_listener(&gw, &sa, (unsigned)gw.cfg.http_threads,
                                          (unsigned)gw.cfg.conn_limit, gw.conns, https);
    if (!d) {
        log_error("cannot listen on %s (in use, or not an address of this host?)", gw.cfg.listen);
        goto out;
    }
    unsigned port = listener_port(d);
    snprintf(base_url, sizeof base_url, "%s://%s%s%s:%u", https ? "https" : "http",
             sa.ss_family == AF_INET6 ? "[" : "", host, sa.ss_family == AF_INET6 ? "]" : "", port);
    if (bootstrap_echo_app(&gw, base_url) != 0)
        log_error("could not create the bootstrap echo App (the gateway runs without it)");
    if (https) {
        char about[600];
        tls_describe(about, sizeof about);
        log_info("TLS: serving %s (TLS 1.2 and later)", about);
    }
    log_info("listening on %s:%u (%s, schema version %d, %lld HTTP threads)", host, port,
             https ? "https" : "http", store_schema_version(), (long long)gw.cfg.http_threads);

    for (;;) {
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            break;
        reload(&gw);
    }
    log_info("stopping on signal %d", sig);
    __atomic_store_n(&gw.stopping, 1, __ATOMIC_SEQ_CST);
    /* No new connections; the listening socket is ours to close once the daemon has stopped. */
    MHD_socket listen_fd = MHD_quiesce_daemon(d);
    longpoll_stop(gw.lp, 2000);
    sse_stop(gw.sse, 2000);
    http_message_drain(&gw, 5000);
    MHD_stop_daemon(d);
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    rc = 0;
out:
    if (gw.metrics_daemon)
        MHD_stop_daemon(gw.metrics_daemon);
    sse_free(gw.sse);
    longpoll_free(gw.lp);
    ratelimit_free(gw.rl);
    ratelimit_free(gw.rl_prefix);
    client_conns_free(gw.conns);
    trusted_proxies_free(gw.proxies);
    metrics_free(gw.metrics);
    notify_peer_free(gw.workers);
    notify_peer_free(gw.gateways);
    key_cache_free(gw.keys);
    pki_free(gw.pki);
    secret_box_free(gw.secrets);
    store_close(gw.st);
    /* After the listeners: a handshake may use a pair until its daemon has stopped. */
    tls_close();
    return rc;
}

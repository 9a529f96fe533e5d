/*
 * config.c: the table of settings and the three sources they are read from.
 */
#include "fs.h"
#include "config.h"

#include "egress_settings.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum setting_type { SETTING_STR, SETTING_INT };

struct setting {
    const char *name; /* file key; the flag is --name with '_' as '-'; env is SBX_NAME */
    enum setting_type type;
    size_t offset;
    size_t size;
    const char *def; /* "" for derived or empty */
    int64_t min, max;
    const char *help;
};

#define STR(field, def, help)                                                                      \
    {                                                                                              \
#field, SETTING_STR, offsetof(struct sbx_config, field),                                   \
            sizeof(((struct sbx_config *)0)->field), def, 0, 0, help                               \
    }
#define INT(field, def, lo, hi, help)                                                              \
    {                                                                                              \
#field, SETTING_INT, offsetof(struct sbx_config, field), sizeof(int64_t), def, lo, hi,     \
            help                                                                                   \
    }

static const struct setting settings[] = {
    STR(data_dir, "./data", "directory of the database, Workspaces, jails and run files"),
    STR(db_path, "", "SQLite database file (default <data_dir>/sbx.db)"),
    STR(store, "sqlite",
        "store backend: sqlite (the file db_path, one host) or a postgres:// URL (several hosts)"),
    STR(listen, "127.0.0.1:8080", "address and port the gateway listens on"),
    STR(admin_token, "", "admin bearer token (generated and printed once when unset)"),
    STR(driver, "process", "driver of new Apps: process, qemu or firecracker"),
    INT(pool_size, "2", 0, 1000, "warm Sandboxes kept ready per shape"),
    INT(prestart_ready_timeout, "60", 1, 3600,
        "seconds a pre-started agent has to start (and, with readiness line, to print "
        "{\"type\":\"ready\"}) before its Sandbox is ended as not ready"),
    INT(workers, "1", 1, 64, "worker processes started by `tools/sbx up`"),
    INT(body_limit, "1048576", 1024, 1073741824, "largest request body in bytes (413 above)"),
    INT(max_wait, "60", 0, 3600, "cap of the ?wait= long poll in seconds"),
    INT(http_threads, "0", 0, 1024, "gateway HTTP threads (0: one per CPU)"),
    INT(http_conn_memory, "8192", 4096, 1048576,
        "memory pool per HTTP connection in bytes: holds its request headers (431 above about 3/4 "
        "of it); an open stream uses about half of it"),
    INT(conn_limit, "10000", 1, 1000000, "simultaneous HTTP connections"),
    INT(conn_timeout, "120", 1, 86400, "seconds an idle HTTP connection is kept"),
    INT(conn_per_client, "256", 1, 1000000,
        "simultaneous HTTP connections from one client address (trusted proxies: unlimited)"),
    INT(auth_fail_limit, "100", 1, 1000000,
        "failed auths from one client address, or with one key prefix, per window (429 beyond)"),
    INT(auth_fail_window, "60", 1, 86400, "seconds of the failed-auth window"),
    INT(auth_cache_ms, "2000", 0, 60000,
        "how long the gateway trusts an API key it looked up (0: every request reads the store); "
        "a revoke or App delete through any gateway ends it at once"),
    STR(trusted_proxies, "",
        "proxies whose X-Forwarded-For names the client (comma-separated addresses or CIDRs)"),
    STR(metrics_token, "", "bearer token /metrics requires (none when unset)"),
    STR(metrics_listen, "",
        "address and port of a listener of its own for /metrics (default: the API listener)"),
    INT(busy_timeout_ms, "5000", 0, 600000,
        "how long a write waits for the store's write lock (SQLite busy timeout, PostgreSQL "
        "lock_timeout); 503 beyond it"),
    STR(synchronous, "FULL", "SQLite synchronous mode: FULL (a 202 is on disk) or NORMAL"),
    STR(worker_synchronous, "NORMAL",
        "workers' SQLite synchronous mode: NORMAL (fsync at the next FULL commit) or FULL"),
    INT(claim_overlap, "1", 0, 1,
        "1: workers claim a new message while the gateway syncs it (SQLite, synchronous FULL); "
        "it reaches the agent only once on disk. 0: after"),
    INT(lease_ms, "30000", 100, 3600000, "delivery lease; an expired lease is delivered again"),
    INT(message_timeout, "30", 1, 3600, "seconds an agent has to answer one message"),
    INT(reply_limit, "1048576", 1024, 1073741824, "largest agent reply line in bytes"),
    STR(chroot_base, "", "base of the per-Sandbox jails (default <data_dir>/jail)"),
    STR(cgroup_root, "", "cgroup v2 directory for Sandboxes (default: detected)"),
    STR(rootfs, "", "read-only root filesystem of process Sandboxes (default: built)"),
    INT(sandbox_uid, "65534", 1, 4294967294LL,
        "uid of Workspace files; the agent's uid when sandbox_uid_range is off"),
    INT(sandbox_gid, "65534", 1, 4294967294LL,
        "gid of Workspace files; the agent's gid when sandbox_uid_range is off"),
    STR(sandbox_uid_range, "200000-265535",
        "host uids (= gids) given one per process Sandbox; off: all run as sandbox_uid"),
    INT(workspace_size_mib, "1024", 16, 1048576,
        "size of a Workspace created without sizeMib (MiB; its own ext4 filesystem)"),
    INT(workspace_max_mib, "65536", 16, 1048576,
        "largest sizeMib of a Workspace (MiB; 422 above), at least workspace_size_mib"),
    INT(disk_reserve_mib, "1024", 0, 1073741824,
        "MiB of the Workspaces' filesystem never promised to Workspaces (kept for the store): a "
        "Workspace whose size the rest cannot hold is refused (507)"),
    INT(quota_live_sandboxes, "0", 0, 1000000,
        "an App's live Sandboxes, for Apps without their own quota (0: no bound)"),
    INT(quota_sessions, "0", 0, 1000000000,
        "an App's live Sessions, for Apps without their own quota (0: no bound; 429 beyond)"),
    INT(quota_workspaces, "0", 0, 1000000000,
        "an App's Workspaces, for Apps without their own quota (0: no bound; 429 beyond)"),
    INT(quota_workspace_mib, "0", 0, 1099511627776LL,
        "MiB of an App's Workspaces together, for Apps without their own quota (0: no bound; 429 "
        "beyond)"),
    INT(quota_keep_alive_seconds, "0", 0, 86400,
        "largest keepAliveSeconds of an App and its Sessions, for Apps without their own quota "
        "(0: no bound; 422 above)"),
    INT(vmm_log_max_kib, "1024", 16, 1048576,
        "cap of a microVM's console and VMM logs (KiB each; rotated, one older copy kept)"),
    INT(sandbox_pids_max, "1024", 16, 4194304, "processes and threads per Sandbox (pids cgroup)"),
    STR(net_pool, "10.213.0.0/16", "addresses for Sandbox links (a /30 each)"),
    STR(egress_ports, "80,443",
        "TCP ports a Sandbox may open to public IPv4 (comma-separated); all else is dropped"),
    STR(dns_resolvers, "",
        "IPv4 addresses Sandboxes may send DNS to, comma-separated, or none (default: the "
        "public nameservers of /etc/resolv.conf)"),
    STR(qemu_bin, "qemu-system-x86_64", "QEMU binary of the qemu driver"),
    STR(qemu_accel, "tcg", "qemu accelerator: tcg, kvm or auto"),
    STR(guest_dir, "", "guest kernel and initramfs (default <data_dir>/guest)"),
    STR(firecracker_bin, "", "firecracker binary of the firecracker driver"),
    STR(jailer_bin, "", "jailer binary of the firecracker driver"),
    STR(log_level, "info", "debug, info, warn or error"),
    INT(max_sandboxes, "64", 1, 100000, "Sandboxes serving Sessions at once, per worker"),
    INT(job_threads, "4", 1, 256, "worker threads for blocking driver calls (boot, terminate)"),
    INT(poll_ms, "1000", 50, 600000, "fallback poll of the queue and stop requests (ms)"),
    INT(heartbeat_ms, "1000", 50, 600000, "worker heartbeat and lease renewal interval (ms)"),
    INT(worker_stale_ms, "30000", 200, 3600000,
        "heartbeat age after which a worker of this host id on another machine is dead (ms)"),
    INT(retry_base_ms, "1000", 0, 3600000, "backoff before the first retry (doubles, jittered)"),
    INT(retry_max_ms, "60000", 0, 86400000, "largest retry backoff (ms)"),
    INT(shutdown_grace, "10", 0, 3600, "seconds SIGTERM waits for deliveries in flight"),
    STR(host_id, "", "this worker's host in the store (default: the machine's hostname)"),
    STR(host_address, "", "address other components reach this host at (recorded only)"),
    INT(host_capacity, "0", 0, 10000000,
        "Sessions this host serves at once, for placement (0: max_sandboxes x workers)"),
    INT(host_lost_ms, "15000", 200, 3600000,
        "heartbeat age after which a host is lost: its Sandboxes end, its Sessions move (ms)"),
    INT(placement_grace_ms, "2000", 0, 3600000,
        "wait for the placed host before any host may take an idle Session's message (ms)"),
    INT(chunk_max_count, "10000", 0, 100000000,
        "partial-output chunks stored per message (more are dropped and counted)"),
    INT(chunk_max_bytes, "4194304", 0, 1073741824,
        "bytes of partial-output chunks stored per message (more are dropped and counted)"),
    INT(chunk_flush_ms, "5", 0, 10000,
        "a worker commits an agent's chunks at most once per this interval (ms; 0: each at once)"),
    INT(stream_limit, "64", 1, 1000000,
        "open event streams (message streams and the event feed) per caller (429 beyond)"),
    INT(stream_keepalive, "15", 1, 3600, "seconds between keep-alive comments on an idle stream"),
    INT(webhook_allow_private, "0", 0, 1,
        "1: webhook URLs may point at loopback, private and link-local addresses"),
    INT(webhook_timeout_ms, "10000", 100, 600000, "time limit of one webhook attempt (ms)"),
    INT(webhook_max_attempts, "10", 1, 1000, "attempts per webhook delivery before it fails"),
    INT(webhook_failing_after, "5", 1, 1000,
        "consecutive failed attempts that mark a webhook endpoint failing"),
    INT(webhook_retry_base_ms, "1000", 0, 3600000,
        "first webhook retry backoff (doubles per attempt, jittered) (ms)"),
    INT(webhook_retry_max_ms, "300000", 0, 86400000, "largest webhook retry backoff (ms)"),
    INT(webhook_threads, "2", 0, 64,
        "worker threads delivering webhooks, one endpoint each at a time (0: none)"),
    INT(webhook_poll_ms, "2000", 10, 600000,
        "fallback poll of the webhook outbox for lost wake-ups (ms)"),
    INT(image_upload_limit, "8589934592", 1024, 1099511627776LL,
        "largest uploaded image archive in bytes (413 above); also the limit of a pull"),
    INT(image_unpacked_limit, "17179869184", 1024, 1099511627776LL,
        "largest unpacked image tree in bytes, and of an import's decompressed layers (the import "
        "fails above)"),
    INT(image_cache_limit, "0", 0, 1099511627776LL,
        "bytes of this host's image cache before unused images are evicted (0: no limit)"),
    STR(insecure_registries, "",
        "registries (host[:port], comma-separated) pulled over plain http; https otherwise"),
    STR(ca_dir, "",
        "directory of the installation CA and token signing key, shared by every host (default "
        "<data_dir>/ca)"),
    STR(secrets_key_file, "",
        "file of the key that seals App secrets, shared by every host (default "
        "<ca_dir>/secrets.key, made at first start)"),
    STR(public_url, "",
        "the gateway's URL as callers reach it: the identity tokens' issuer (default "
        "http[s]://<listen>)"),
    STR(callback_listen, "0.0.0.0:443",
        "IPv4 address (port 443) of the Sandboxes' callback API on each worker's host (off: none)"),
    INT(callback_rate, "50", 1, 100000,
        "callback requests per second from one Sandbox to one worker process (429 above)"),
    INT(callback_body_limit, "65536", 1024, 16777216,
        "largest callback request body in bytes (413 above)"),
    INT(identity_token_ttl, "600", 60, 86400, "seconds an identity token is valid"),
    STR(tls_cert_file, "", "PEM certificate chain: the gateway serves HTTPS (reloaded on SIGHUP)"),
    STR(tls_key_file, "", "PEM private key of tls_cert_file"),
    INT(image_entries_limit, "1000000", 1, 1000000000LL,
        "most entries of an image import: of the archive, and of its layers together (the import "
        "fails above)"),
    INT(registry_pull_timeout, "3600", 1, 604800,
        "seconds a registry pull may take, all its requests together (the import fails above)"),
    INT(registry_low_speed_limit, "1024", 1, 1073741824,
        "bytes per second below which a registry response is too slow"),
    INT(registry_low_speed_time, "60", 1, 3600,
        "seconds a registry response may stay below registry_low_speed_limit"),
    /* the brokering egress proxy of Apps with secrets (docs/secrets.md) */
    STR(upstream_ca_file, "",
        "PEM CA certificates the secrets proxy trusts for upstreams, besides the host's CA store"),
    INT(secret_proxy_connections, "32", 1, 4096,
        "open connections of one Sandbox through the secrets proxy (more are closed at once)"),
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

static const struct setting *setting_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strlen(settings[i].name) == len && strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

static int setting_set(struct sbx_config *cfg, const struct setting *s, const char *value,
                       const char *source, char *err, size_t errlen)
{
    char *field = (char *)cfg + s->offset;
    if (s->type == SETTING_STR) {
        if (strlen(value) >= s->size) {
            snprintf(err, errlen, "%s: %s is too long (at most %zu bytes)", source, s->name,
                     s->size - 1);
            return -1;
        }
        strcpy(field, value);
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0' || v < s->min || v > s->max) {
        snprintf(err, errlen, "%s: %s must be an integer from %lld to %lld, not \"%s\"", source,
                 s->name, (long long)s->min, (long long)s->max, value);
        return -1;
    }
    *(int64_t *)(void *)field = v;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int config_read_file(struct sbx_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[1024], source[600];
    int lineno = 0, rc = 0;

    if (!f) {
        snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        snprintf(source, sizeof source, "%s:%d", path, lineno);
        if (!eq) {
            snprintf(err, errlen, "%s: expected \"key = value\"", source);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        const struct setting *st = setting_find(key, strlen(key));
        if (!st) {
            snprintf(err, errlen, "%s: unknown setting \"%s\"", source, key);
            rc = -1;
            break;
        }
        rc = setting_set(cfg, st, value, source, err, errlen);
    }
    fclose(f);
    return rc;
}

static void env_name(const struct setting *s, char *out, size_t outlen)
{
    size_t i = (size_t)snprintf(out, outlen, "SBX_");
    for (const char *p = s->name; *p && i + 1 < outlen; p++)
        out[i++] = (char)toupper((unsigned char)*p);
    out[i] = '\0';
}

static void flag_name(const struct setting *s, char *out, size_t outlen)
{
    size_t i = (size_t)snprintf(out, outlen, "--");
    for (const char *p = s->name; *p && i + 1 < outlen; p++)
        out[i++] = *p == '_' ? '-' : *p;
    out[i] = '\0';
}

/* Makes a relative path absolute against the working directory, dropping a leading "./". */
static int make_absolute(char *path, size_t size, char *err, size_t errlen)
{
    char cwd[512], joined[1100];
    if (path[0] == '\0' || path[0] == '/')
        return 0;
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(err, errlen, "cannot resolve %s: no working directory (%s)", path,
                 strerror(errno));
        return -1;
    }
    const char *rel = path;
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2;
    int n = snprintf(joined, sizeof joined, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, rel);
    if (n < 0 || (size_t)n >= size) {
        snprintf(err, errlen, "%s/%s is too long", cwd, rel);
        return -1;
    }
    memcpy(path, joined, (size_t)n + 1);
    return 0;
}

int config_load(struct sbx_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    const char *file = getenv("SBX_CONFIG");
    char name[64];

    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (setting_set(cfg, &settings[i], settings[i].def, "default", err, errlen) != 0)
            return -1;

    for (int i = 1; i < argc; i++) {
        if (argv[i] && strncmp(argv[i], "--config", 8) == 0) {
            if (argv[i][8] == '=')
                file = argv[i] + 9;
            else if (argv[i][8] == '\0' && i + 1 < argc)
                file = argv[i + 1];
        }
    }
    if (file && *file && config_read_file(cfg, file, err, errlen) != 0)
        return -1;

    for (size_t i = 0; i < N_SETTINGS; i++) {
        env_name(&settings[i], name, sizeof name);
        const char *v = getenv(name);
        if (v && setting_set(cfg, &settings[i], v, name, err, errlen) != 0)
            return -1;
    }

    for (int i = 1; i < argc; i++) {
        if (!argv[i] || strncmp(argv[i], "--", 2) != 0)
            continue;
        const char *arg = argv[i] + 2, *eq = strchr(arg, '='), *value;
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len == 6 && strncmp(arg, "config", 6) == 0) {
            if (!eq && i + 1 < argc)
                argv[i + 1] = NULL;
            argv[i] = NULL;
            continue;
        }
        char key[64];
        if (len >= sizeof key)
            continue;
        for (size_t k = 0; k < len; k++)
            key[k] = arg[k] == '-' ? '_' : arg[k];
        key[len] = '\0';
        const struct setting *st = setting_find(key, len);
        if (!st)
            continue; /* the caller's own flag, or an unknown one it reports */
        if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc && argv[i + 1]) {
            value = argv[i + 1];
            argv[i + 1] = NULL;
        } else {
            snprintf(err, errlen, "flag --%.*s needs a value", (int)len, arg);
            return -1;
        }
        flag_name(st, name, sizeof name);
        if (setting_set(cfg, st, value, name, err, errlen) != 0)
            return -1;
        argv[i] = NULL;
    }

    /* Paths become absolute against the working directory at start: the jails, the Workspaces
     * and the drivers' children must not depend on a later chdir(), and the default data_dir is
     * the relative "./data". */
    char *paths[] = {cfg->data_dir,      cfg->db_path,      cfg->chroot_base,
                     cfg->guest_dir,     cfg->rootfs,       cfg->ca_dir,
                     cfg->tls_cert_file, cfg->tls_key_file, cfg->secrets_key_file};
    size_t sizes[] = {
        sizeof cfg->data_dir,      sizeof cfg->db_path,      sizeof cfg->chroot_base,
        sizeof cfg->guest_dir,     sizeof cfg->rootfs,       sizeof cfg->ca_dir,
        sizeof cfg->tls_cert_file, sizeof cfg->tls_key_file, sizeof cfg->secrets_key_file};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (make_absolute(paths[i], sizes[i], err, errlen) != 0)
            return -1;
    if (make_absolute(cfg->upstream_ca_file, sizeof cfg->upstream_ca_file, err, errlen) != 0)
        return -1;
    if (cfg->db_path[0] == '\0')
        snprintf(cfg->db_path, sizeof cfg->db_path, "%.500s/sbx.db", cfg->data_dir);
    if (cfg->chroot_base[0] == '\0')
        snprintf(cfg->chroot_base, sizeof cfg->chroot_base, "%.500s/jail", cfg->data_dir);
    if (cfg->ca_dir[0] == '\0')
        snprintf(cfg->ca_dir, sizeof cfg->ca_dir, "%.500s/ca", cfg->data_dir);
    if (!cfg->tls_cert_file[0] != !cfg->tls_key_file[0]) {
        snprintf(err, errlen, "tls_cert_file and tls_key_file go together: set both or neither");
        return -1;
    }
    /* The firewall opens TCP 443 of the host to Sandboxes, and nothing else: the callback API
     * must listen there. */
    if (strcmp(cfg->callback_listen, "off") != 0) {
        const char *colon = strrchr(cfg->callback_listen, ':');
        if (!colon || strcmp(colon, ":443") != 0 || colon == cfg->callback_listen) {
            snprintf(err, errlen,
                     "callback_listen must be an IPv4 address with port 443 (the port the "
                     "firewall opens to Sandboxes), or off; not \"%.64s\"",
                     cfg->callback_listen);
            return -1;
        }
    }
    if (cfg->public_url[0] == '\0')
        snprintf(cfg->public_url, sizeof cfg->public_url, "%s://%.200s",
                 cfg->tls_cert_file[0] ? "https" : "http", cfg->listen);
    if (cfg->host_id[0] == '\0' && gethostname(cfg->host_id, sizeof cfg->host_id) != 0)
        snprintf(cfg->host_id, sizeof cfg->host_id, "localhost");
    cfg->host_id[sizeof cfg->host_id - 1] = '\0';
    /* The host id names the host in the store, in metrics labels and in logs: a hostname's
     * characters only. */
    if (cfg->host_id[strspn(cfg->host_id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789._-")] != '\0') {
        snprintf(err, errlen,
                 "host_id may hold letters, digits, '.', '_' and '-' only, not \"%.64s\"",
                 cfg->host_id);
        return -1;
    }
    if (cfg->workspace_size_mib > cfg->workspace_max_mib) {
        snprintf(err, errlen,
                 "workspace_size_mib (%lld) is above workspace_max_mib (%lld): Workspaces created "
                 "without sizeMib would be refused",
                 (long long)cfg->workspace_size_mib, (long long)cfg->workspace_max_mib);
        return -1;
    }
    if (cfg->host_capacity == 0)
        cfg->host_capacity = cfg->max_sandboxes * cfg->workers;
    if (cfg->guest_dir[0] == '\0')
        snprintf(cfg->guest_dir, sizeof cfg->guest_dir, "%.500s/guest", cfg->data_dir);
    if (strcmp(cfg->synchronous, "FULL") != 0 && strcmp(cfg->synchronous, "NORMAL") != 0) {
        snprintf(err, errlen, "synchronous must be FULL or NORMAL, not \"%s\"", cfg->synchronous);
        return -1;
    }
    if (strcmp(cfg->worker_synchronous, "FULL") != 0 &&
        strcmp(cfg->worker_synchronous, "NORMAL") != 0) {
        snprintf(err, errlen, "worker_synchronous must be FULL or NORMAL, not \"%s\"",
                 cfg->worker_synchronous);
        return -1;
    }
    if (strcmp(cfg->store, "sqlite") != 0 && strncmp(cfg->store, "postgres://", 11) != 0 &&
        strncmp(cfg->store, "postgresql://", 13) != 0) {
        snprintf(
            err, errlen,
            "store must be sqlite or a postgres:// (postgresql://) connection URL, not \"%.64s\"",
            cfg->store);
        return -1;
    }
    if (strcmp(cfg->driver, "process") != 0 && strcmp(cfg->driver, "qemu") != 0 &&
        strcmp(cfg->driver, "firecracker") != 0) {
        snprintf(err, errlen, "driver must be process, qemu or firecracker, not \"%s\"",
                 cfg->driver);
        return -1;
    }
    struct egress_settings egress;
    if (egress_settings_parse(cfg->egress_ports, cfg->dns_resolvers, &egress, err, errlen) != 0)
        return -1;
    return 0;
}

mode_t config_private_mode(mode_t owner_mode)
{
    static mode_t mask = (mode_t)-1;
    mode_t mode = owner_mode & 0700;
    if (mask == (mode_t)-1) {
        /* Read once, at start-up (one thread): umask() can only be read by setting it. */
        mask = umask(0077);
        umask(mask);
    }
    if ((mask & 0070) == 0) /* the unit asks for group access (UMask=0007) */
        mode |= (mode & 0700) >> 3;
    return mode;
}

int config_make_data_dirs(const struct sbx_config *cfg, char *err, size_t errlen)
{
    char run_dir[600];
    snprintf(run_dir, sizeof run_dir, "%.500s/run", cfg->data_dir);
    /* The data directory holds every App's messages: private to sbx's user (and group, where
     * the unit asks for it), whoever creates it first. An existing one keeps its mode. */
    if (fs_mkdir_p(cfg->data_dir, config_private_mode(0700)) != 0 ||
        fs_mkdir_p(run_dir, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", run_dir, strerror(errno));
        return -1;
    }
    return 0;
}

void config_print_reference(FILE *out)
{
    char env[64], flag[64];
    fprintf(out, "%-18s %-22s %-20s %-16s %s\n", "setting", "environment", "flag", "default",
            "meaning");
    for (size_t i = 0; i < N_SETTINGS; i++) {
        env_name(&settings[i], env, sizeof env);
        flag_name(&settings[i], flag, sizeof flag);
        fprintf(out, "%-18s %-22s %-20s %-16s %s\n", settings[i].name, env, flag,
                *settings[i].def ? settings[i].def : "-", settings[i].help);
    }
}

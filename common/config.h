/*
 * config.h: every setting of sbx, from a config file, the environment and flags.
 *
 * Precedence: a flag overrides the environment, which overrides the file, which overrides the
 * built-in default. The file is named by --config or SBX_CONFIG and holds "key = value" lines
 * ('#' starts a comment); its keys are the setting names below (data_dir, listen, ...). The one
 * table in config.c is the reference: `sbx-gateway --help` and the README print it.
 */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct sbx_config {
    char data_dir[512];    /* SBX_DATA_DIR: database, workspaces, jails, run/ */
    char db_path[512];     /* SBX_DB_PATH: default <data_dir>/sbx.db */
    char store[1024];      /* SBX_STORE: "" or sqlite (db_path), or a postgres:// URL */
    char listen[128];      /* SBX_LISTEN: host:port of the gateway */
    char admin_token[256]; /* SBX_ADMIN_TOKEN: generated on first start when empty */
    char driver[16];       /* SBX_DRIVER: default driver of new Apps */
    int64_t pool_size;     /* SBX_POOL_SIZE: warm Sandboxes per shape */
    /* SBX_PRESTART_READY_TIMEOUT: seconds a pre-started agent has to be ready */
    int64_t prestart_ready_timeout;
    int64_t workers;             /* SBX_WORKERS: worker processes `sbx up` starts */
    int64_t body_limit;          /* SBX_BODY_LIMIT: request body bytes */
    int64_t max_wait;            /* SBX_MAX_WAIT: cap of ?wait= in seconds */
    int64_t http_threads;        /* SBX_HTTP_THREADS: gateway thread pool, 0: one per CPU */
    int64_t http_conn_memory;    /* SBX_HTTP_CONN_MEMORY: MHD's pool per connection */
    int64_t conn_limit;          /* SBX_CONN_LIMIT: simultaneous HTTP connections */
    int64_t conn_timeout;        /* SBX_CONN_TIMEOUT: idle seconds before a connection is closed */
    int64_t conn_per_client;     /* SBX_CONN_PER_CLIENT: connections from one client address */
    int64_t auth_fail_limit;     /* SBX_AUTH_FAIL_LIMIT: failed auths per address per window */
    int64_t auth_fail_window;    /* SBX_AUTH_FAIL_WINDOW: seconds of that window (429 beyond) */
    int64_t auth_cache_ms;       /* SBX_AUTH_CACHE_MS: life of a cached API key lookup */
    char trusted_proxies[1024];  /* SBX_TRUSTED_PROXIES: whose X-Forwarded-For is believed */
    char metrics_token[256];     /* SBX_METRICS_TOKEN: bearer token of /metrics, "" for none */
    char metrics_listen[128];    /* SBX_METRICS_LISTEN: host:port of /metrics, "" for listen */
    int64_t busy_timeout_ms;     /* SBX_BUSY_TIMEOUT_MS: SQLite busy timeout */
    char synchronous[16];        /* SBX_SYNCHRONOUS: FULL or NORMAL (the gateway's commits) */
    char worker_synchronous[16]; /* SBX_WORKER_SYNCHRONOUS: FULL or NORMAL (the workers') */
    int64_t claim_overlap;       /* SBX_CLAIM_OVERLAP: claims overlap the enqueue's fsync */
    int64_t lease_ms;            /* SBX_LEASE_MS: delivery lease */
    int64_t message_timeout;     /* SBX_MESSAGE_TIMEOUT: seconds an agent has to answer */
    int64_t reply_limit;         /* SBX_REPLY_LIMIT: bytes of one agent reply line */
    char chroot_base[512];       /* SBX_CHROOT_BASE: default <data_dir>/jail */
    char cgroup_root[512];       /* SBX_CGROUP_ROOT: cgroup v2 directory for Sandboxes */
    char rootfs[512];            /* SBX_ROOTFS: the process driver's read-only root filesystem */
    int64_t sandbox_uid;         /* SBX_SANDBOX_UID */
    int64_t sandbox_gid;         /* SBX_SANDBOX_GID */
    char sandbox_uid_range[64];  /* SBX_SANDBOX_UID_RANGE: "A-B", a uid per Sandbox; "off" */
    int64_t workspace_size_mib;  /* SBX_WORKSPACE_SIZE_MIB: a Workspace's size without sizeMib */
    /* Apps' quotas and the Workspaces' disk (docs/tenants.md) */
    int64_t workspace_max_mib;        /* SBX_WORKSPACE_MAX_MIB: largest sizeMib (422 above) */
    int64_t disk_reserve_mib;         /* SBX_DISK_RESERVE_MIB: kept free of Workspaces' promises */
    int64_t quota_live_sandboxes;     /* SBX_QUOTA_LIVE_SANDBOXES: an App's default, 0: none */
    int64_t quota_sessions;           /* SBX_QUOTA_SESSIONS */
    int64_t quota_workspaces;         /* SBX_QUOTA_WORKSPACES */
    int64_t quota_workspace_mib;      /* SBX_QUOTA_WORKSPACE_MIB */
    int64_t quota_keep_alive_seconds; /* SBX_QUOTA_KEEP_ALIVE_SECONDS */
    int64_t vmm_log_max_kib;          /* SBX_VMM_LOG_MAX_KIB: cap of each VMM and console log */
    int64_t sandbox_pids_max;         /* SBX_SANDBOX_PIDS_MAX: tasks per Sandbox (pids cgroup) */
    char net_pool[64];                /* SBX_NET_POOL: addresses for Sandbox links */
    char egress_ports[256];           /* SBX_EGRESS_PORTS: TCP ports open to public IPv4 */
    char dns_resolvers[256];          /* SBX_DNS_RESOLVERS: "" = the host's public nameservers */
    char qemu_bin[256];               /* SBX_QEMU_BIN */
    char qemu_accel[16];              /* SBX_QEMU_ACCEL: tcg, kvm or auto */
    char guest_dir[512];              /* SBX_GUEST_DIR: guest kernel and initramfs */
    char firecracker_bin[256];        /* SBX_FIRECRACKER_BIN */
    char jailer_bin[256];             /* SBX_JAILER_BIN */
    char log_level[16];               /* SBX_LOG_LEVEL */
    /* worker */
    int64_t max_sandboxes;   /* SBX_MAX_SANDBOXES: Sandboxes serving Sessions per worker */
    int64_t job_threads;     /* SBX_JOB_THREADS: threads for blocking driver calls */
    int64_t poll_ms;         /* SBX_POLL_MS: fallback queue poll interval */
    int64_t heartbeat_ms;    /* SBX_HEARTBEAT_MS: worker heartbeat and lease renewal */
    int64_t worker_stale_ms; /* SBX_WORKER_STALE_MS: heartbeat age after which a worker is dead */
    int64_t retry_base_ms;   /* SBX_RETRY_BASE_MS: first retry backoff (doubles per attempt) */
    int64_t retry_max_ms;    /* SBX_RETRY_MAX_MS: largest retry backoff */
    int64_t shutdown_grace;  /* SBX_SHUTDOWN_GRACE: seconds SIGTERM waits for deliveries */
    /* hosts: one host is one machine's workers, which share its kernel state */
    char host_id[128];          /* SBX_HOST_ID: default the machine's hostname */
    char host_address[256];     /* SBX_HOST_ADDRESS: how others reach this host (recorded only) */
    int64_t host_capacity;      /* SBX_HOST_CAPACITY: 0 = max_sandboxes x workers */
    int64_t host_lost_ms;       /* SBX_HOST_LOST_MS: heartbeat age after which a host is lost */
    int64_t placement_grace_ms; /* SBX_PLACEMENT_GRACE_MS: then any host may take a message */
    /* streaming: an agent's partial output and Server-Sent Events */
    int64_t chunk_max_count;  /* SBX_CHUNK_MAX_COUNT: chunks stored per message */
    int64_t chunk_max_bytes;  /* SBX_CHUNK_MAX_BYTES: chunk bytes stored per message */
    int64_t chunk_flush_ms;   /* SBX_CHUNK_FLUSH_MS: how long chunks gather before a commit */
    int64_t stream_limit;     /* SBX_STREAM_LIMIT: open streams per caller (429 beyond) */
    int64_t stream_keepalive; /* SBX_STREAM_KEEPALIVE: seconds between keep-alive comments */
    /* webhooks */
    int64_t webhook_allow_private; /* SBX_WEBHOOK_ALLOW_PRIVATE: 1 = loopback/private allowed */
    int64_t webhook_timeout_ms;    /* SBX_WEBHOOK_TIMEOUT_MS: one attempt's time limit */
    int64_t webhook_max_attempts;  /* SBX_WEBHOOK_MAX_ATTEMPTS: then the delivery fails */
    int64_t webhook_failing_after; /* SBX_WEBHOOK_FAILING_AFTER: failed attempts in a row */
    int64_t webhook_retry_base_ms; /* SBX_WEBHOOK_RETRY_BASE_MS */
    int64_t webhook_retry_max_ms;  /* SBX_WEBHOOK_RETRY_MAX_MS */
    int64_t webhook_threads;       /* SBX_WEBHOOK_THREADS: per worker process */
    int64_t webhook_poll_ms;       /* SBX_WEBHOOK_POLL_MS: fallback for lost wake-ups */
    /* images (docs/images.md) */
    int64_t image_upload_limit;     /* SBX_IMAGE_UPLOAD_LIMIT: bytes of an uploaded image archive */
    int64_t image_unpacked_limit;   /* SBX_IMAGE_UNPACKED_LIMIT: bytes of an unpacked image tree */
    int64_t image_cache_limit;      /* SBX_IMAGE_CACHE_LIMIT: bytes of a host's image cache */
    char insecure_registries[1024]; /* SBX_INSECURE_REGISTRIES: host[:port],... pulled over http */
    /* the installation's keys, the agents' callbacks, TLS (docs/callbacks.md) */
    char ca_dir[512];                 /* SBX_CA_DIR: the installation CA and signing key */
    char secrets_key_file[512];       /* SBX_SECRETS_KEY_FILE: App secrets' key ("": in ca_dir) */
    char public_url[256];             /* SBX_PUBLIC_URL: the gateway's URL, the tokens' issuer */
    char callback_listen[128];        /* SBX_CALLBACK_LISTEN: the callback API's address, "off" */
    int64_t callback_rate;            /* SBX_CALLBACK_RATE: requests per second per Sandbox */
    int64_t callback_body_limit;      /* SBX_CALLBACK_BODY_LIMIT: bytes of a callback body */
    int64_t identity_token_ttl;       /* SBX_IDENTITY_TOKEN_TTL: seconds an identity token lives */
    char tls_cert_file[512];          /* SBX_TLS_CERT_FILE: the gateway serves HTTPS with it */
    char tls_key_file[512];           /* SBX_TLS_KEY_FILE */
    int64_t image_entries_limit;      /* SBX_IMAGE_ENTRIES_LIMIT: entries of an image import */
    int64_t registry_pull_timeout;    /* SBX_REGISTRY_PULL_TIMEOUT: seconds of a whole pull */
    int64_t registry_low_speed_limit; /* SBX_REGISTRY_LOW_SPEED_LIMIT: bytes per second */
    int64_t registry_low_speed_time;  /* SBX_REGISTRY_LOW_SPEED_TIME: seconds below it */
    /* the brokering egress proxy (docs/secrets.md) */
    char upstream_ca_file[512];       /* SBX_UPSTREAM_CA_FILE: extra CAs for upstreams */
    int64_t secret_proxy_connections; /* SBX_SECRET_PROXY_CONNECTIONS: per Sandbox */
};

/* Fills cfg from defaults, the file, the environment and argv (in that order of precedence,
 * lowest first). Unknown flags or keys, and malformed values, are errors: returns -1 with a
 * message in err. Flags not about settings are left for the caller: argv entries that were
 * consumed are set to NULL. */
int config_load(struct sbx_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* The mode of a file or directory only sbx may read: owner_mode's owner bits, and the same bits
 * for the group when the process's umask leaves group write open (a unit file's UMask=0007 asks
 * for a group shared by the gateway and the workers); never anything for others. */
mode_t config_private_mode(mode_t owner_mode);

/* Creates data_dir (config_private_mode(0700)) and its run/ directory (0700) when missing,
 * whichever daemon starts first. Returns 0, or -1 with the reason in err. */
int config_make_data_dirs(const struct sbx_config *cfg, char *err, size_t errlen);

/* Prints the reference table: name, environment variable, flag, default, meaning. */
void config_print_reference(FILE *out);

#endif

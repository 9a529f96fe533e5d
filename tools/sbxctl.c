/*
 * sbxctl.c: the command line tool for operators and auditors of sbx: main(), the table of
 * subcommands, global options, argument parsing and opening the database read-only.
 *
 * Settings come from common/config.c like the daemons' (--config FILE, SBX_* variables, flags such
 * as --data-dir), so `sbxctl` finds the database the running sbx uses. --db PATH (or SBX_DB)
 * names the database file directly.
 */
#include "sbxctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct ctl_command commands[] = {
    {"apps", "sbxctl apps [--all]", "List the Apps (--all: with deleted ones).", cmd_apps},
    {"sessions", "sbxctl sessions [--app ID] [--state STATE] [--all] [--limit N]",
     "List Sessions, oldest first (--all: with deleted ones).", cmd_sessions},
    {"session", "sbxctl session ID|NAME",
     "Show one Session: its details, its messages, the Sandboxes that served it and its whole "
     "timeline (events, messages, Sandboxes) in time order. Deleted Sessions are shown too.",
     cmd_session},
    {"sandboxes", "sbxctl sandboxes [--state STATE] [--session ID] [--app ID] [--live] [--limit N]",
     "List Sandboxes with their lifetimes, termination reasons, usage and callback calls, oldest "
     "first.",
     cmd_sandboxes},
    {"sandbox", "sbxctl sandbox ID [--terminate]",
     "Show one Sandbox: lifetime, runtime (pid, jail, cgroup, address), its callback calls and the "
     "last one's time, the messages it served and its events. --terminate asks the gateway to "
     "terminate it (DELETE /v1/sandboxes/ID with the "
     "admin token from SBX_ADMIN_TOKEN or the config file).",
     cmd_sandbox},
    {"messages", "sbxctl messages [--session ID] [--state STATE] [--limit N]",
     "List messages with the Sandbox that served each (the newest --limit, default 100).",
     cmd_messages},
    {"events",
     "sbxctl events [--session ID] [--object ID] [--kind KIND] [--since T] [--until T] "
     "[--after-id N] [--limit N] [--follow]",
     "List audit events oldest first: without --since, the last --limit (default 100); with it, "
     "the first --limit after T (--limit 0: all). T is an ISO 8601 UTC time "
     "(2026-11-29T08:00:00Z, 2026-11-29), a duration ago (90s, 15m, 2h, 7d), today or yesterday "
     "(midnight UTC) or "
     "ms since the epoch. --follow keeps printing new events until interrupted: from the "
     "gateway's live event feed when SBX_ADMIN_TOKEN is set, else by reading the database (with "
     "--json: one JSON object per line).",
     cmd_events},
    {"pool", "sbxctl pool",
     "The warm pool per shape: warm, booting, in use, cold activations, boot failures, boot "
     "times, and the configured target (pool_size).",
     cmd_pool},
    {"hosts", "sbxctl hosts",
     "The worker hosts on this store: address, capacity, running workers, Sessions served, live "
     "Sandboxes, last heartbeat and state (live; stale: heartbeat older than host_lost_ms, about "
     "to be declared lost; lost: declared lost at lost_utc).",
     cmd_hosts},
    {"keys", "sbxctl keys [--app ID] [--history]",
     "List API keys (never their secrets); --history: every creation and revocation, with who "
     "did it and the request id.",
     cmd_keys},
    {"db", "sbxctl db check [--stale-after SECONDS] | sbxctl db backup PATH [--force]",
     "check: integrity_check, foreign keys, migration level against this binary, the append-only "
     "triggers, the integrity views (sandbox_reuse_violations, orphan_rows), workers silent for "
     "longer than --stale-after (default: the worker_stale_ms setting), and "
     "leftover jails/cgroups of ended Sandboxes; exits 1 when anything is wrong. backup: a "
     "consistent copy through SQLite's online backup API, safe while sbx writes; the copy is "
     "checked before it is moved to PATH.",
     cmd_db},
    {"image",
     "sbxctl image push FILE --name NAME [--no-wait] | image pull REFERENCE --name NAME "
     "[--username USER --password-stdin] [--no-wait] | image ls | image rm ID|NAME",
     "Images, through the gateway with the admin token (SBX_ADMIN_TOKEN or the config file). "
     "push uploads a docker-archive or OCI archive (a progress bar on stderr when it is a "
     "terminal) and follows the import until the Image is ready (exit 0) or failed (exit 1, "
     "with its problem code); pull asks the gateway to pull REFERENCE (HOST[:PORT]/REPO[:TAG] or "
     "...@sha256:HEX; the password from stdin or SBX_REGISTRY_PASSWORD, never the command "
     "line) and follows it the same way; ls lists the Images; rm deletes one (refused while an "
     "App names it).",
     cmd_image},
    {"firewall", "sbxctl firewall [--raw]",
     "The nftables table `inet sbx`, read through the firewall's read-only fw_open(): which "
     "Sandbox owns which element, with the store's view of each Sandbox, and the drop counters; "
     "flags elements of ended or unknown Sandboxes and live Sandboxes with an address but no "
     "element (exit 1). --raw adds the whole table as `nft list table inet sbx` prints it. Needs "
     "root (CAP_NET_ADMIN); exit 3 when the table cannot be read.",
     cmd_firewall},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

const struct ctl_command *ctl_find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_usage(FILE *out)
{
    fprintf(out, "usage: sbxctl [--db PATH] [--config FILE] [--ca-file FILE] [--json] [--wide] "
                 "COMMAND [ARGS]\n\n"
                 "Reads the sbx database read-only (works while sbx runs and when it is down).\n\n"
                 "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %s\n", commands[i].usage);
    fprintf(out,
            "\nGlobal options (before or after the command):\n"
            "  --db PATH      the database (default: SBX_DB, else db_path of the config, else\n"
            "                 <data_dir>/sbx.db; data_dir from --data-dir or SBX_DATA_DIR)\n"
            "  --config FILE  a config file as the daemons read it; any setting flag works too\n"
            "  --ca-file FILE CA certificates (PEM) to trust for the gateway's HTTPS (when\n"
            "                 tls_cert_file is set; default: SBXCTL_CA_FILE, else the system's)\n"
            "  --json         machine-readable output; field names are the database columns\n"
            "  --wide         do not shorten long cells in tables\n"
            "  --help         this text; `sbxctl COMMAND --help` for one command\n\n"
            "Exit codes: 0 ok, 1 check failed or not found, 2 usage, 3 error (database or\n"
            "gateway unreachable).\n");
}

/* Prints text word-wrapped at width columns. */
static void print_wrapped(FILE *out, const char *text, size_t width)
{
    size_t col = 0;
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > 0 && col + 1 + word > width) {
            fputc('\n', out);
            col = 0;
        } else if (col > 0) {
            fputc(' ', out);
            col++;
        }
        fwrite(text, 1, word, out);
        col += word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', out);
}

void ctl_command_help(const struct ctl_command *cmd, FILE *out)
{
    fprintf(out, "usage: %s\n       (global: --json --wide --db PATH --config FILE)\n\n",
            cmd->usage);
    print_wrapped(out, cmd->help, 78);
}

int ctl_usage_error(const struct ctl_command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sbxctl %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\n", cmd->usage);
    return CTL_USAGE;
}

int ctl_parse(const struct ctl_command *cmd, int argc, char **argv, const struct ctl_opt *opts,
              const char **pos, int maxpos, int *npos, int *exit_code)
{
    *npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            ctl_command_help(cmd, stdout);
            *exit_code = CTL_OK;
            return -1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (*npos >= maxpos) {
                *exit_code = ctl_usage_error(cmd, "unexpected argument \"%s\"", a);
                return -1;
            }
            pos[(*npos)++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const struct ctl_opt *o = NULL;
        for (const struct ctl_opt *p = opts; p && p->name; p++)
            if (strlen(p->name) == len && strncmp(p->name, a, len) == 0)
                o = p;
        if (!o) {
            *exit_code = ctl_usage_error(cmd, "unknown option %.*s", (int)len, a);
            return -1;
        }
        if (o->flag) {
            if (eq) {
                *exit_code = ctl_usage_error(cmd, "%s takes no value", o->name);
                return -1;
            }
            *o->flag = true;
        } else if (eq) {
            *o->value = eq + 1;
        } else if (i + 1 < argc) {
            *o->value = argv[++i];
        } else {
            *exit_code = ctl_usage_error(cmd, "%s needs a value", o->name);
            return -1;
        }
    }
    return 0;
}

int ctl_parse_count(const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* Opens path read-only (immutable: without locks or the -shm file) and checks it is readable. */
static int open_readonly(struct ctl *ctl, bool immutable, int *rc_out, char *msg, size_t msglen)
{
    char uri[1200];
    char *err = NULL;
    int rc;
    if (immutable) {
        /* A URI path must escape '%', '?' and '#'; sbx's paths have none, refuse those that do. */
        if (strpbrk(ctl->db_path, "%?#")) {
            snprintf(msg, msglen, "path has characters a URI would need to escape");
            *rc_out = SQLITE_CANTOPEN;
            return -1;
        }
        snprintf(uri, sizeof uri, "file:%s?mode=ro&immutable=1", ctl->db_path);
        rc = sqlite3_open_v2(uri, &ctl->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    } else {
        rc = sqlite3_open_v2(ctl->db_path, &ctl->db, SQLITE_OPEN_READONLY, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_extended_result_codes(ctl->db, 1);
        /* sbx may hold the write lock for a moment; a WAL reader rarely waits, but the first read
         * after a checkpoint can. */
        sqlite3_busy_timeout(ctl->db, (int)ctl->cfg.busy_timeout_ms);
        /* Is it a database at all? Fail here, with a clear message, if not. */
        rc = sqlite3_exec(ctl->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, &err);
    }
    if (rc != SQLITE_OK) {
        snprintf(msg, msglen, "%s",
                 err ? err : (ctl->db ? sqlite3_errmsg(ctl->db) : sqlite3_errstr(rc)));
        sqlite3_free(err);
        sqlite3_close(ctl->db);
        ctl->db = NULL;
        *rc_out = rc;
        return -1;
    }
    return 0;
}

int ctl_open(struct ctl *ctl)
{
    char msg[512], wal[600];
    int rc;
    /* READONLY: sbxctl never writes, so it cannot disturb sbx nor change what it audits. */
    if (open_readonly(ctl, false, &rc, msg, sizeof msg) == 0)
        return CTL_OK;
    /* A WAL database needs its -shm file, which a reader creates when sbx is down. A reader who
     * may not write the directory (an auditor with read access only) cannot; with sbx down there
     * is no -wal file, the database file is complete, and nobody writes it, so it can be read as
     * immutable. */
    snprintf(wal, sizeof wal, "%s-wal", ctl->db_path);
    if (((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN) &&
        access(ctl->db_path, R_OK) == 0 && access(wal, F_OK) != 0 &&
        open_readonly(ctl, true, &rc, msg, sizeof msg) == 0) {
        fprintf(stderr,
                "sbxctl: note: %s is not being written (no -wal file) and its directory "
                "is not writable for you; reading it without locks\n",
                ctl->db_path);
        return CTL_OK;
    }
    fprintf(stderr, "sbxctl: cannot open the database %s: %s\n", ctl->db_path, msg);
    if (access(ctl->db_path, F_OK) != 0)
        fprintf(stderr, "sbxctl: (no such file: pass --db PATH, or set SBX_DATA_DIR or SBX_DB to "
                        "where sbx keeps its data)\n");
    return CTL_ERROR;
}

/* Takes the global options out of argv (compacting it) and returns the new argc, or -1. */
static int take_global_options(struct ctl *ctl, int argc, char **argv, bool *help)
{
    int n = 0;
    const char *db = getenv("SBX_DB");
    const char *ca = getenv("SBXCTL_CA_FILE");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!a)
            continue; /* consumed by config_load */
        if (strcmp(a, "--json") == 0) {
            ctl->json = true;
        } else if (strcmp(a, "--wide") == 0) {
            ctl->wide = true;
        } else if (strcmp(a, "--db") == 0 || strncmp(a, "--db=", 5) == 0) {
            if (a[4] == '=') {
                db = a + 5;
            } else if (i + 1 < argc && argv[i + 1]) {
                db = argv[++i];
            } else {
                fprintf(stderr, "sbxctl: --db needs a path\n");
                return -1;
            }
        } else if (strcmp(a, "--ca-file") == 0 || strncmp(a, "--ca-file=", 10) == 0) {
            if (a[9] == '=') {
                ca = a + 10;
            } else if (i + 1 < argc && argv[i + 1]) {
                ca = argv[++i];
            } else {
                fprintf(stderr, "sbxctl: --ca-file needs a path\n");
                return -1;
            }
        } else if (n == 0 && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            *help = true;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (db && *db)
        snprintf(ctl->db_path, sizeof ctl->db_path, "%s", db);
    else
        snprintf(ctl->db_path, sizeof ctl->db_path, "%s", ctl->cfg.db_path);
    snprintf(ctl->ca_file, sizeof ctl->ca_file, "%s", ca ? ca : "");
    return n;
}

int main(int argc, char **argv)
{
    static struct ctl ctl;
    char err[512];
    bool help = false;

    /* config_load consumes the setting flags (--data-dir, --listen, --config, ...) it knows and
     * leaves ours. */
    if (config_load(&ctl.cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "sbxctl: %s\n", err);
        return CTL_USAGE;
    }
    int n = take_global_options(&ctl, argc - 1, argv + 1, &help);
    if (n < 0)
        return CTL_USAGE;
    if (help || n == 0 || strcmp(argv[1], "help") == 0) {
        const struct ctl_command *cmd = n >= 2 ? ctl_find_command(argv[2]) : NULL;
        if (cmd && !help)
            ctl_command_help(cmd, stdout);
        else
            print_usage(n == 0 && !help ? stderr : stdout);
        return n == 0 && !help ? CTL_USAGE : CTL_OK;
    }
    const struct ctl_command *cmd = ctl_find_command(argv[1]);
    if (!cmd) {
        fprintf(stderr, "sbxctl: unknown command \"%s\" (try sbxctl --help)\n", argv[1]);
        return CTL_USAGE;
    }
    int rc = cmd->run(&ctl, n - 1, argv + 2);
    if (ctl.db)
        sqlite3_close(ctl.db);
    return rc;
}

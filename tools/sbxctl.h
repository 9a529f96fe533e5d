/*
 * sbxctl.h: what the files of sbxctl (the operators' and auditors' command line tool) share: the
 * open database, output in human tables or JSON, argument parsing and exit codes.
 *
 * sbxctl reads the SQLite database directly and read-only, so it works while sbx runs (WAL lets
 * it read a consistent snapshot without blocking writers) and when sbx is down. Where an action is
 * needed (terminating a Sandbox) it asks the gateway over HTTP on loopback (HTTPS when the gateway
 * has tls_cert_file), never the database.
 */
#ifndef SBX_SBXCTL_H
#define SBX_SBXCTL_H

#include "config.h"

#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* Exit codes: what scripts can rely on. */
enum {
    CTL_OK = 0,    /* done; for checks: everything is fine */
    CTL_FAIL = 1,  /* a check failed, or the object asked for does not exist */
    CTL_USAGE = 2, /* bad command line */
    CTL_ERROR = 3, /* could not do it: database unreadable, gateway unreachable, ... */
};

struct ctl {
    struct sbx_config cfg;
    char db_path[512];
    char ca_file[512]; /* --ca-file / SBXCTL_CA_FILE: trusted for an HTTPS gateway; "": system's */
    sqlite3 *db;       /* read-only; opened by ctl_open() */
    bool json;         /* --json: machine-readable output on stdout */
    bool wide;         /* --wide: do not shorten long cells in tables */
};

/* One subcommand: name, usage line, what it does, and its function (args exclude the name). */
struct ctl_command {
    const char *name;
    const char *usage;
    const char *help;
    int (*run)(struct ctl *ctl, int argc, char **argv);
};

/* Opens ctl->db_path read-only. On failure prints why and returns CTL_ERROR. */
int ctl_open(struct ctl *ctl);

/* Runs sql with parameters described by types ('s': const char * or NULL for SQL NULL, 'i':
 * int64_t) and returns its rows as a JSON array of objects keyed by column name (integers stay
 * integers, NULL is null, and text columns named in ctl_json_columns holding valid JSON are
 * embedded as JSON). NULL on error (printed). */
json_t *ctl_query(struct ctl *ctl, const char *sql, const char *types, ...);
/* Like ctl_query, for a query that gives one row: the object, json_null() when none. */
json_t *ctl_query_one(struct ctl *ctl, const char *sql, const char *types, ...);

/* A column of a human table: the JSON key it shows and its header. */
struct ctl_col {
    const char *key;
    const char *header;
};
/* Prints rows as an aligned table (header first; "(none)" when empty). */
void ctl_print_table(const struct ctl *ctl, json_t *rows, const struct ctl_col *cols);
/* Prints one object as "label: value" lines, indented. */
void ctl_print_fields(const struct ctl *ctl, json_t *obj, const struct ctl_col *cols);
/* A cell as text: "-" for null, numbers in decimal, JSON compact. Caller frees. */
char *ctl_cell_text(json_t *v);
/* Writes v as JSON on stdout with a newline; compact when one_line. */
void ctl_print_json(json_t *v, bool one_line);

/* ---- argument parsing ---- */
struct ctl_opt {
    const char *name;   /* "--session" */
    const char **value; /* set for an option with a value */
    bool *flag;         /* set for a flag */
};
/* Parses argv against opts; positional arguments go to pos (at most maxpos). --help prints the
 * command's help and returns -1 with *exit_code CTL_OK; errors print and give CTL_USAGE. */
int ctl_parse(const struct ctl_command *cmd, int argc, char **argv, const struct ctl_opt *opts,
              const char **pos, int maxpos, int *npos, int *exit_code);
void ctl_command_help(const struct ctl_command *cmd, FILE *out);
/* Prints "sbxctl <name>: <message>" and the usage line to stderr; returns CTL_USAGE. */
int ctl_usage_error(const struct ctl_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parses a time for --since/--until: RFC 3339 / ISO 8601 ("2026-11-29T08:00:00.123Z",
 * "2026-11-29 08:00", "2026-11-29"), a duration ago ("90s", "15m", "2h", "7d"), "today",
 * "yesterday", "now", or milliseconds since the epoch. Returns 0 and *ms, or -1. */
int ctl_parse_time(struct ctl *ctl, const char *text, int64_t *ms);
/* Parses a positive integer (for --limit); -1 when it is not one. */
int ctl_parse_count(const char *text, int64_t *out);

/* ---- subcommands ---- */
int cmd_apps(struct ctl *ctl, int argc, char **argv);
int cmd_sessions(struct ctl *ctl, int argc, char **argv);
int cmd_session(struct ctl *ctl, int argc, char **argv);
int cmd_sandboxes(struct ctl *ctl, int argc, char **argv);
int cmd_sandbox(struct ctl *ctl, int argc, char **argv);
int cmd_messages(struct ctl *ctl, int argc, char **argv);
int cmd_events(struct ctl *ctl, int argc, char **argv);
int cmd_pool(struct ctl *ctl, int argc, char **argv);
int cmd_hosts(struct ctl *ctl, int argc, char **argv);
int cmd_keys(struct ctl *ctl, int argc, char **argv);
int cmd_db(struct ctl *ctl, int argc, char **argv);
int cmd_firewall(struct ctl *ctl, int argc, char **argv);
int cmd_image(struct ctl *ctl, int argc, char **argv);

const struct ctl_command *ctl_find_command(const char *name);

/* Reads the gateway's Server-Sent Events stream at path (as admin, after last_event_id) and calls
 * on_event for each event until *stop is set (a signal; returns 0) or the stream fails (-1 with
 * the reason in err; also when there is no admin token or no gateway). */
int ctl_http_stream(const struct ctl *ctl, const char *path, int64_t last_event_id,
                    void (*on_event)(void *arg, const char *id, const char *data), void *arg,
                    volatile sig_atomic_t *stop, char *err, size_t errlen);

/* ---- the gateway, for actions ---- */
/* Where the gateway is reached: on cfg.listen (every-address listeners on loopback), over HTTPS
 * when cfg.tls_cert_file is set, its certificate checked for the host of cfg.public_url (which
 * defaults to the listen address), against ctl->ca_file or else the system's trusted CAs. */
struct ctl_gateway {
    bool https;
    char host[128]; /* connected to */
    char port[16];
    char name[256]; /* the certificate is checked for this name (HTTPS only) */
};
/* Fills g; -1 with the reason in err when listen is not host:port. */
int ctl_gateway(const struct ctl *ctl, struct ctl_gateway *g, char *err, size_t errlen);

/* Sends method path with the admin token to the gateway at cfg.listen; writes the HTTP status and
 * the body (caller frees). Returns 0, or -1 with the reason in err. */
int ctl_http(const struct ctl *ctl, const char *method, const char *path, int *status, char **body,
             char *err, size_t errlen);

#endif

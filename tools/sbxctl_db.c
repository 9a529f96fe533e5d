/*
 * sbxctl_db.c: `sbxctl db check` (is the database sound, at the right migration, and free of
 * Sandbox reuse and orphans?) and `sbxctl db backup PATH` (a consistent copy while sbx writes).
 */
#include "sbxctl.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- check ---- */

struct checks {
    json_t *list; /* [{name, status, detail, rows}] */
    bool failed;
    int64_t schema_version; /* the database's migration level */
};

/* Records one check. status: "ok", "warn" or "fail". Takes rows (may be NULL). */
static void add_check(struct checks *c, const char *name, const char *status, const char *detail,
                      json_t *rows)
{
    json_t *o = json_pack("{ssssss}", "name", name, "status", status, "detail", detail);
    json_object_set_new(o, "rows", rows ? rows : json_array());
    json_array_append_new(c->list, o);
    if (strcmp(status, "fail") == 0)
        c->failed = true;
}

/* A check whose problems are the rows of a query: ok when there are none. */
static void check_rows(struct ctl *ctl, struct checks *c, const char *name, const char *sql,
                       const char *what_ok, const char *what_bad)
{
    char detail[256];
    json_t *rows = ctl_query(ctl, sql, NULL);
    if (!rows) {
        add_check(c, name, "fail", "could not run the check (see the error above)", NULL);
        return;
    }
    size_t n = json_array_size(rows);
    if (n == 0)
        snprintf(detail, sizeof detail, "%s", what_ok);
    else
        snprintf(detail, sizeof detail, "%zu %s", n, what_bad);
    add_check(c, name, n ? "fail" : "ok", detail, rows);
}

static void check_integrity(struct ctl *ctl, struct checks *c)
{
    json_t *rows = ctl_query(ctl, "PRAGMA integrity_check", NULL);
    if (!rows) {
        add_check(c, "integrity", "fail", "integrity_check could not run", NULL);
        return;
    }
    json_t *first = json_object_get(json_array_get(rows, 0), "integrity_check");
    bool ok = json_array_size(rows) == 1 && json_is_string(first) &&
              strcmp(json_string_value(first), "ok") == 0;
    add_check(c, "integrity", ok ? "ok" : "fail",
              ok ? "PRAGMA integrity_check: ok" : "PRAGMA integrity_check found damage",
              ok ? NULL : rows);
    if (ok)
        json_decref(rows);
}

static void check_schema_version(struct ctl *ctl, struct checks *c)
{
    char detail[256];
    json_t *row = ctl_query_one(ctl, "PRAGMA user_version", NULL);
    int64_t have = row ? json_integer_value(json_object_get(row, "user_version")) : -1;
    int want = store_schema_version();
    json_decref(row);
    c->schema_version = have;
    if (have == want)
        snprintf(detail, sizeof detail, "migration level %lld, as this build expects",
                 (long long)have);
    else if (have < want)
        snprintf(detail, sizeof detail,
                 "migration level %lld, this build has %d: starting sbx of this build migrates "
                 "it",
                 (long long)have, want);
    else
        snprintf(detail, sizeof detail,
                 "migration level %lld is newer than this build (%d): use a newer sbxctl",
                 (long long)have, want);
    add_check(c, "schema-version", have == want ? "ok" : "fail", detail, NULL);
}

/* The objects that auditing relies on: the views, and the triggers that keep events
 * append-only. */
static void check_audit_objects(struct ctl *ctl, struct checks *c)
{
    static const char *const needed[][2] = {
        {"trigger", "events_no_update"},   {"trigger", "events_no_delete"},
        {"view", "session_timeline"},      {"view", "message_deliveries"},
        {"view", "sandbox_lifetimes"},     {"view", "key_audit"},
        {"view", "sandbox_session_links"}, {"view", "sandbox_reuse_violations"},
        {"view", "orphan_rows"},
    };
    json_t *missing = json_array();
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        json_t *row =
            ctl_query_one(ctl, "SELECT name FROM sqlite_master WHERE type = ?1 AND name = ?2", "ss",
                          needed[i][0], needed[i][1]);
        if (!row || json_is_null(row))
            json_array_append_new(missing,
                                  json_pack("{ssss}", "type", needed[i][0], "name", needed[i][1]));
        json_decref(row);
    }
    size_t n = json_array_size(missing);
    char detail[256];
    if (n == 0)
        snprintf(detail, sizeof detail,
                 "events is append-only (triggers) and the auditor views "
                 "exist");
    else
        snprintf(detail, sizeof detail, "%zu auditing objects are missing", n);
    add_check(c, "audit-objects", n ? "fail" : "ok", detail, missing);
}

/* Workers that stopped heartbeating without saying they stopped. While one of them still owns
 * live Sandboxes or leases, those are orphaned until another worker adopts them. */
static void check_workers(struct ctl *ctl, struct checks *c, int64_t stale_ms)
{
    json_t *rows = ctl_query(
        ctl,
        "SELECT w.id AS worker_id, w.host, w.pid, w.heartbeat_at, "
        "strftime('%Y-%m-%dT%H:%M:%fZ', w.heartbeat_at / 1000.0, 'unixepoch') AS heartbeat_utc, "
        "(SELECT count(*) FROM sandboxes b WHERE b.worker_id = w.id AND b.state NOT IN "
        "('terminated', 'failed')) AS live_sandboxes, "
        "(SELECT count(*) FROM messages m WHERE m.lease_owner = w.id AND m.state = "
        "'delivering') AS leases "
        "FROM workers w WHERE w.stopped_at IS NULL AND w.heartbeat_at < "
        "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER) - ?1 "
        "ORDER BY w.heartbeat_at",
        "i", stale_ms);
    if (!rows) {
        add_check(c, "workers", "fail", "could not read the workers", NULL);
        return;
    }
    size_t i, n = json_array_size(rows), owning = 0;
    json_t *w;
    json_array_foreach(rows, i, w)
    {
        if (json_integer_value(json_object_get(w, "live_sandboxes")) > 0 ||
            json_integer_value(json_object_get(w, "leases")) > 0)
            owning++;
    }
    char detail[256];
    if (n == 0)
        snprintf(detail, sizeof detail, "every running worker heartbeated in the last %lld ms",
                 (long long)stale_ms);
    else
        snprintf(detail, sizeof detail,
                 "%zu workers silent for over %lld ms, %zu of them own live Sandboxes or leases "
                 "(orphaned until a worker adopts them)",
                 n, (long long)stale_ms, owning);
    add_check(c, "workers", owning ? "fail" : (n ? "warn" : "ok"), detail, rows);
}

static bool path_exists(const char *p)
{
    struct stat st;
    return p && p[0] == '/' && lstat(p, &st) == 0;
}

/* Host state that should be gone: the jail directory or cgroup of an ended Sandbox, and jail
 * directories under chroot_base that belong to no live Sandbox. Only what this host can see. */
static void check_host_leftovers(struct ctl *ctl, struct checks *c)
{
    json_t *found = json_array();
    json_t *ended = ctl_query(ctl,
                              "SELECT id, state, jail_dir, cgroup_path FROM sandboxes WHERE "
                              "state IN ('terminated', 'failed') AND (jail_dir IS NOT NULL OR "
                              "cgroup_path IS NOT NULL)",
                              NULL);
    size_t i;
    json_t *b;
    json_array_foreach(ended, i, b)
    {
        const char *jail = json_string_value(json_object_get(b, "jail_dir"));
        const char *cg = json_string_value(json_object_get(b, "cgroup_path"));
        const char *id = json_string_value(json_object_get(b, "id"));
        if (path_exists(jail))
            json_array_append_new(
                found, json_pack("{ssssss}", "sandbox_id", id, "what", "jail", "path", jail));
        if (path_exists(cg))
            json_array_append_new(
                found, json_pack("{ssssss}", "sandbox_id", id, "what", "cgroup", "path", cg));
    }
    json_decref(ended);

    /* <chroot_base>/<driver>/<sandboxId>: a directory whose Sandbox is not live. */
    static const char *const drivers[] = {"process", "qemu", "firecracker"};
    for (size_t d = 0; d < 3; d++) {
        char dir[700];
        snprintf(dir, sizeof dir, "%s/%s", ctl->cfg.chroot_base, drivers[d]);
        DIR *dh = opendir(dir);
        if (!dh)
            continue;
        struct dirent *de;
        while ((de = readdir(dh))) {
            if (strncmp(de->d_name, "sbx_", 4) != 0)
                continue;
            json_t *row = ctl_query_one(ctl,
                                        "SELECT state FROM sandboxes WHERE id = ?1 AND state NOT "
                                        "IN ('terminated', 'failed')",
                                        "s", de->d_name);
            if (row && json_is_null(row)) {
                char path[1000];
                snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
                json_array_append_new(found, json_pack("{ssssss}", "sandbox_id", de->d_name, "what",
                                                       "jail of no live Sandbox", "path", path));
            }
            json_decref(row);
        }
        closedir(dh);
    }
    size_t n = json_array_size(found);
    char detail[256];
    if (n == 0)
        snprintf(detail, sizeof detail,
                 "no jail or cgroup of an ended Sandbox is left on this "
                 "host");
    else
        snprintf(detail, sizeof detail, "%zu jails or cgroups of ended Sandboxes are left", n);
    add_check(c, "host-leftovers", n ? "fail" : "ok", detail, found);
}

static int db_check(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("db");
    const char *stale_text = NULL;
    /* By default a worker is dead when sbx itself would say so (worker_stale_ms). */
    int64_t stale_ms = ctl->cfg.worker_stale_ms, stale_s;
    const struct ctl_opt opts[] = {{"--stale-after", &stale_text, NULL}, {0}};
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if (stale_text) {
        if (ctl_parse_count(stale_text, &stale_s) != 0)
            return ctl_usage_error(cmd, "--stale-after must be seconds, not \"%s\"", stale_text);
        stale_ms = stale_s * 1000;
    }
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;

    struct checks c = {json_array(), false, -1};
    check_integrity(ctl, &c);
    check_rows(ctl, &c, "foreign-keys", "PRAGMA foreign_key_check", "every reference resolves",
               "rows reference a missing parent");
    check_schema_version(ctl, &c);
    check_audit_objects(ctl, &c);
    check_rows(ctl, &c, "sandbox-reuse",
               "SELECT * FROM sandbox_reuse_violations ORDER BY sandbox_id, violation",
               "no Sandbox served two Sessions or was used after it ended",
               "violations of one-Session-per-Sandbox / no-reuse (sandbox_reuse_violations)");
    check_rows(ctl, &c, "orphans", "SELECT * FROM orphan_rows ORDER BY problem, row_id",
               "no row points at something missing or dead", "orphaned rows (orphan_rows)");
    check_workers(ctl, &c, stale_ms);
    check_host_leftovers(ctl, &c);

    if (ctl->json) {
        json_t *out =
            json_pack("{sbsssIsisO}", "ok", !c.failed, "database", ctl->db_path, "schema_version",
                      (json_int_t)c.schema_version, "expected_schema_version",
                      store_schema_version(), "checks", c.list);
        ctl_print_json(out, false);
        json_decref(out);
    } else {
        size_t i;
        json_t *chk;
        printf("%s\n", ctl->db_path);
        json_array_foreach(c.list, i, chk)
        {
            const char *status = json_string_value(json_object_get(chk, "status"));
            printf("  %-4s  %-15s %s\n", strcmp(status, "ok") == 0 ? "ok" : status,
                   json_string_value(json_object_get(chk, "name")),
                   json_string_value(json_object_get(chk, "detail")));
            json_t *rows = json_object_get(chk, "rows");
            size_t j;
            json_t *row;
            json_array_foreach(rows, j, row)
            {
                char *t = json_dumps(row, JSON_COMPACT);
                printf("          - %s\n", t ? t : "?");
                free(t);
            }
        }
        printf("%s\n", c.failed ? "FAILED" : "OK");
    }
    json_decref(c.list);
    return c.failed ? CTL_FAIL : CTL_OK;
}

/* ---- backup ---- */

static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Copies the source into dest with the online backup API in one step: one read transaction on
 * the source, so the copy is one consistent snapshot; in WAL mode that does not block sbx's
 * writers. Retries while the source is busy (a checkpoint holding a lock). */
static int copy_database(struct ctl *ctl, sqlite3 *dest, char *err, size_t errlen)
{
    sqlite3_backup *b = sqlite3_backup_init(dest, "main", ctl->db, "main");
    if (!b) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(dest));
        return -1;
    }
    int rc, tries = 0;
    while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED) {
        if (++tries > 100)
            break;
        struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "backup stopped: %s", sqlite3_errstr(rc));
        return -1;
    }
    return 0;
}

/* The finished copy: a single self-contained file (rollback journal, no -wal beside it), checked
 * page by page. Writes the copy's schema version. */
static int finish_copy(sqlite3 *dest, int *version, char *err, size_t errlen)
{
    sqlite3_stmt *s = NULL;
    char *msg = NULL;
    if (sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s", msg ? msg : "cannot set the journal mode");
        sqlite3_free(msg);
        return -1;
    }
    if (sqlite3_prepare_v2(dest, "PRAGMA integrity_check", -1, &s, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(dest));
        return -1;
    }
    int rc = sqlite3_step(s);
    const char *result = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    if (!result || strcmp(result, "ok") != 0) {
        snprintf(err, errlen, "the copy fails integrity_check: %s", result ? result : "no result");
        sqlite3_finalize(s);
        return -1;
    }
    sqlite3_finalize(s);
    if (sqlite3_prepare_v2(dest, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        *version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return 0;
}

static int db_backup(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("db");
    bool force = false;
    const struct ctl_opt opts[] = {{"--force", NULL, &force}, {0}};
    const char *pos[1];
    int npos, rc, version = -1;
    char tmp[1100], err[512], dir[1100];
    struct stat st;

    if (ctl_parse(cmd, argc, argv, opts, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1)
        return ctl_usage_error(cmd, "db backup needs the PATH of the copy");
    const char *path = pos[0];
    if (!force && lstat(path, &st) == 0) {
        fprintf(stderr, "sbxctl: %s exists; pass --force to replace it\n", path);
        return CTL_FAIL;
    }
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    /* Built beside PATH and renamed over it only once checked, so PATH is never half a copy. */
    snprintf(tmp, sizeof tmp, "%s.partial-%ld", path, (long)getpid());
    sqlite3 *dest = NULL;
    if (sqlite3_open_v2(tmp, &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        fprintf(stderr, "sbxctl: cannot create %s: %s\n", tmp, sqlite3_errmsg(dest));
        sqlite3_close(dest);
        return CTL_ERROR;
    }
    rc = copy_database(ctl, dest, err, sizeof err);
    if (rc == 0)
        rc = finish_copy(dest, &version, err, sizeof err);
    sqlite3_close(dest);
    if (rc == 0 && (fsync_path(tmp, O_RDONLY) != 0 || rename(tmp, path) != 0)) {
        snprintf(err, sizeof err, "cannot move the copy to %s: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "sbxctl: backup of %s failed: %s\n", ctl->db_path, err);
        unlink(tmp);
        return CTL_ERROR;
    }
    snprintf(dir, sizeof dir, "%s", path);
    fsync_path(dirname(dir), O_RDONLY | O_DIRECTORY);
    stat(path, &st);
    if (ctl->json) {
        json_t *out =
            json_pack("{sssssIsiss}", "source", ctl->db_path, "path", path, "bytes",
                      (json_int_t)st.st_size, "schema_version", version, "integrity", "ok");
        ctl_print_json(out, false);
        json_decref(out);
    } else {
        printf("backed up %s to %s (%lld bytes, schema version %d, integrity_check ok)\n",
               ctl->db_path, path, (long long)st.st_size, version);
    }
    return CTL_OK;
}

int cmd_db(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("db");
    if (argc >= 1 && strcmp(argv[0], "check") == 0)
        return db_check(ctl, argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "backup") == 0)
        return db_backup(ctl, argc - 1, argv + 1);
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        ctl_command_help(cmd, stdout);
        return CTL_OK;
    }
    return ctl_usage_error(cmd, argc ? "unknown db subcommand \"%s\"" : "check or backup?%s",
                           argc ? argv[0] : "");
}

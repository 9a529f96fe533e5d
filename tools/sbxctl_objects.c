/*
 * sbxctl_objects.c: the read-only subcommands about sbx's objects: apps, sessions, session,
 * sandboxes, sandbox, messages, pool, keys. Each is one or a few SQL queries over the tables and
 * the auditor views (migrations/0002_auditor_views.sql), printed as a table or as JSON.
 */
#include "sbxctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UTC(col) "strftime('%Y-%m-%dT%H:%M:%fZ', " col " / 1000.0, 'unixepoch')"

/* Prints rows as JSON or as a table; returns CTL_ERROR when the query failed. Takes rows. */
static int emit_rows(struct ctl *ctl, json_t *rows, const struct ctl_col *cols)
{
    if (!rows)
        return CTL_ERROR;
    if (ctl->json)
        ctl_print_json(rows, false);
    else
        ctl_print_table(ctl, rows, cols);
    json_decref(rows);
    return CTL_OK;
}

/* ---- apps ---- */

int cmd_apps(struct ctl *ctl, int argc, char **argv)
{
    bool all = false;
    const struct ctl_opt opts[] = {{"--all", NULL, &all}, {0}};
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(ctl_find_command("apps"), argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    static const struct ctl_col cols[] = {{"id", "ID"},
                                          {"name", "NAME"},
                                          {"driver", "DRIVER"},
                                          {"image", "IMAGE"},
                                          {"vcpu_count", "VCPU"},
                                          {"mem_size_mib", "MEM-MIB"},
                                          {"keep_alive_seconds", "KEEP-ALIVE-S"},
                                          {"sessions", "SESSIONS"},
                                          {"active_keys", "KEYS"},
                                          {"created_utc", "CREATED"},
                                          {"deleted_utc", "DELETED"},
                                          {0}};
    return emit_rows(
        ctl,
        ctl_query(ctl,
                  "SELECT a.id, a.name, a.driver, a.image, a.vcpu_count, a.mem_size_mib, "
                  "a.keep_alive_seconds, a.max_attempts, a.command, "
                  "(SELECT count(*) FROM sessions s WHERE s.app_id = a.id AND s.state <> "
                  "'deleted') AS sessions, "
                  "(SELECT count(*) FROM api_keys k WHERE k.app_id = a.id AND k.revoked_at IS "
                  "NULL) AS active_keys, "
                  "a.created_at, " UTC("a.created_at") " AS created_utc, a.deleted_at, " UTC(
                      "a.deleted_at") " AS deleted_utc "
                                      "FROM apps a WHERE ?1 OR a.deleted_at IS NULL "
                                      "ORDER BY a.created_at, a.id",
                  "i", (int64_t)all),
        cols);
}

/* ---- sessions ---- */

#define SESSION_SELECT                                                                             \
    "SELECT s.id, s.app_id, a.name AS app_name, s.name, s.state, s.sandbox_id, s.workspace_id, "   \
    "s.keep_alive_seconds AS keep_alive_override, "                                                \
    "coalesce(s.keep_alive_seconds, a.keep_alive_seconds) AS keep_alive_seconds, "                 \
    "s.activation_count, "                                                                         \
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id) AS messages, "                    \
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.state IN ('queued', "        \
    "'delivering')) AS pending, "                                                                  \
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.state = 'failed') AS "       \
    "failed, "                                                                                     \
    "s.cpu_usec, s.mem_peak_bytes, s.worker_id, s.metadata, "                                      \
    "s.created_at, " UTC(                                                                          \
        "s.created_at") " AS created_utc, "                                                        \
                        "s.last_activity_at, " UTC(                                                \
                            "s.last_activity_at") " AS last_activity_utc, "                        \
                                                  "s.expires_at, " UTC(                            \
                                                      "s.expires_at") " AS expires_utc, "          \
                                                                      "s.deleted_at, " UTC(        \
                                                                          "s.deleted_at") " AS "   \
                                                                                          "delete" \
                                                                                          "d_utc " \
                                                                                          "FROM "  \
                                                                                          "sessio" \
                                                                                          "ns s "  \
                                                                                          "LEFT "  \
                                                                                          "JOIN "  \
                                                                                          "apps "  \
                                                                                          "a ON "  \
                                                                                          "a.id "  \
                                                                                          "= "     \
                                                                                          "s.app_" \
                                                                                          "id "

int cmd_sessions(struct ctl *ctl, int argc, char **argv)
{
    const char *app = NULL, *state = NULL, *limit_text = NULL;
    bool all = false;
    int64_t limit = 0;
    const struct ctl_opt opts[] = {{"--app", &app, NULL},
                                   {"--state", &state, NULL},
                                   {"--limit", &limit_text, NULL},
                                   {"--all", NULL, &all},
                                   {0}};
    const struct ctl_command *cmd = ctl_find_command("sessions");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if (limit_text && ctl_parse_count(limit_text, &limit) != 0)
        return ctl_usage_error(cmd, "--limit must be a number, not \"%s\"", limit_text);
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    static const struct ctl_col cols[] = {{"id", "ID"},
                                          {"app_name", "APP"},
                                          {"name", "NAME"},
                                          {"state", "STATE"},
                                          {"sandbox_id", "SANDBOX"},
                                          {"activation_count", "ACTIVATIONS"},
                                          {"messages", "MSGS"},
                                          {"pending", "PENDING"},
                                          {"failed", "FAILED"},
                                          {"created_utc", "CREATED"},
                                          {"last_activity_utc", "LAST-ACTIVITY"},
                                          {0}};
    return emit_rows(ctl,
                     ctl_query(ctl,
                               SESSION_SELECT "WHERE (?1 IS NULL OR s.app_id = ?1) "
                                              "AND (?2 IS NULL OR s.state = ?2) "
                                              "AND (?3 OR ?2 = 'deleted' OR s.state <> 'deleted') "
                                              "ORDER BY s.created_at, s.id LIMIT ?4",
                               "ssii", app, state, (int64_t)all, limit > 0 ? limit : (int64_t)-1),
                     cols);
}

/* The Sandboxes' lifetimes (an auditor view) with their callback counts from the table. */
#define SANDBOX_FROM_SQL " sandbox_lifetimes l JOIN sandboxes cb ON cb.id = l.sandbox_id "
#define SANDBOX_CALLBACK_LAST_UTC UTC("cb.callback_last_at")
#define SANDBOX_STOP_UTC UTC("cb.stop_requested_at")
#define SANDBOX_COLS_SQL                                                                           \
    "l.sandbox_id, l.state, l.driver, l.image, l.vcpu_count, l.mem_size_mib, l.worker_id, "        \
    "l.app_id, l.session_id, l.activation, l.boot_ms, l.created_at, l.created_utc, l.ready_utc, "  \
    "l.claimed_utc, l.terminated_at, l.terminated_utc, l.lifetime_ms, l.served_ms, "               \
    "l.termination_reason, l.cpu_usec, l.mem_peak_bytes, l.messages_served, "                      \
    "cb.callback_calls, " SANDBOX_CALLBACK_LAST_UTC " AS callback_last_utc"

static const struct ctl_col session_fields[] = {{"id", "id:"},
                                                {"app_id", "app:"},
                                                {"app_name", "app name:"},
                                                {"name", "name:"},
                                                {"state", "state:"},
                                                {"sandbox_id", "sandbox:"},
                                                {"workspace_id", "workspace:"},
                                                {"keep_alive_seconds", "keep-alive (s):"},
                                                {"activation_count", "activations:"},
                                                {"messages", "messages:"},
                                                {"pending", "pending:"},
                                                {"failed", "failed:"},
                                                {"cpu_usec", "cpu (us):"},
                                                {"mem_peak_bytes", "mem peak (bytes):"},
                                                {"metadata", "metadata:"},
                                                {"created_utc", "created:"},
                                                {"last_activity_utc", "last activity:"},
                                                {"expires_utc", "expires:"},
                                                {"deleted_utc", "deleted:"},
                                                {0}};

static const struct ctl_col message_cols[] = {
    {"message_id", "ID"},         {"seq", "SEQ"},
    {"state", "STATE"},           {"attempts", "ATTEMPTS"},
    {"sandbox_id", "SANDBOX"},    {"created_utc", "CREATED"},
    {"latency_ms", "LATENCY-MS"}, {"request_id", "REQUEST"},
    {"error", "ERROR"},           {0}};

static const struct ctl_col sandbox_cols[] = {{"sandbox_id", "ID"},
                                              {"state", "STATE"},
                                              {"driver", "DRIVER"},
                                              {"session_id", "SESSION"},
                                              {"activation", "POOL"},
                                              {"boot_ms", "BOOT-MS"},
                                              {"created_utc", "CREATED"},
                                              {"terminated_utc", "TERMINATED"},
                                              {"lifetime_ms", "LIFETIME-MS"},
                                              {"termination_reason", "REASON"},
                                              {"cpu_usec", "CPU-US"},
                                              {"mem_peak_bytes", "MEM-PEAK"},
                                              {"messages_served", "MSGS"},
                                              {"callback_calls", "CALLBACKS"},
                                              {0}};

static const struct ctl_col timeline_cols[] = {
    {"at_utc", "TIME"}, {"source", "SOURCE"},      {"kind", "WHAT"},     {"object_id", "OBJECT"},
    {"actor", "ACTOR"}, {"request_id", "REQUEST"}, {"detail", "DETAIL"}, {0}};

/* Finds a Session by id, or by name when the name is unique across Apps. */
static int find_session(struct ctl *ctl, const char *key, json_t **out)
{
    json_t *rows = ctl_query(ctl, SESSION_SELECT "WHERE s.id = ?1 ORDER BY s.created_at", "s", key);
    if (rows && json_array_size(rows) == 0) {
        json_decref(rows);
        rows = ctl_query(ctl, SESSION_SELECT "WHERE s.name = ?1 ORDER BY s.created_at", "s", key);
    }
    if (!rows)
        return CTL_ERROR;
    size_t n = json_array_size(rows);
    if (n != 1) {
        if (n == 0)
            fprintf(stderr, "sbxctl: no Session with id or name \"%s\"\n", key);
        else
            fprintf(stderr, "sbxctl: %zu Sessions are named \"%s\": give the id\n", n, key);
        json_decref(rows);
        return CTL_FAIL;
    }
    *out = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return CTL_OK;
}

int cmd_session(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("session");
    const char *pos[1];
    int npos, rc;
    json_t *session = NULL;
    if (ctl_parse(cmd, argc, argv, NULL, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1)
        return ctl_usage_error(cmd, "which Session? give its id");
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    if ((rc = find_session(ctl, pos[0], &session)) != CTL_OK)
        return rc;
    const char *id = json_string_value(json_object_get(session, "id"));
    json_t *messages = ctl_query(ctl,
                                 "SELECT d.*, m.body, m.reply FROM message_deliveries d "
                                 "JOIN messages m ON m.id = d.message_id "
                                 "WHERE d.session_id = ?1 ORDER BY d.seq",
                                 "s", id);
    /* Every Sandbox with any trace of this Session, so that a Sandbox that wrongly served it
     * shows up here too. */
    json_t *sandboxes = ctl_query(ctl,
                                  "SELECT " SANDBOX_COLS_SQL " FROM" SANDBOX_FROM_SQL
                                  "WHERE l.sandbox_id IN (SELECT sandbox_id FROM "
                                  "sandbox_session_links WHERE session_id = ?1) "
                                  "ORDER BY l.created_at, l.sandbox_id",
                                  "s", id);
    json_t *timeline = ctl_query(ctl,
                                 "SELECT at, at_utc, source, kind, object_type, object_id, "
                                 "sandbox_id, actor, request_id, detail FROM session_timeline "
                                 "WHERE session_id = ?1 ORDER BY at, ord, source",
                                 "s", id);
    rc = CTL_OK;
    if (!messages || !sandboxes || !timeline) {
        rc = CTL_ERROR;
    } else if (ctl->json) {
        json_t *all = json_pack("{sOsOsOsO}", "session", session, "messages", messages, "sandboxes",
                                sandboxes, "timeline", timeline);
        ctl_print_json(all, false);
        json_decref(all);
    } else {
        printf("Session %s\n", id);
        ctl_print_fields(ctl, session, session_fields);
        printf("\nMessages (%zu)\n", json_array_size(messages));
        ctl_print_table(ctl, messages, message_cols);
        printf("\nSandboxes that served it (%zu)\n", json_array_size(sandboxes));
        ctl_print_table(ctl, sandboxes, sandbox_cols);
        printf("\nTimeline (%zu)\n", json_array_size(timeline));
        ctl_print_table(ctl, timeline, timeline_cols);
    }
    json_decref(session);
    json_decref(messages);
    json_decref(sandboxes);
    json_decref(timeline);
    return rc;
}

/* ---- sandboxes ---- */

int cmd_sandboxes(struct ctl *ctl, int argc, char **argv)
{
    const char *state = NULL, *session = NULL, *app = NULL, *limit_text = NULL;
    bool live = false;
    int64_t limit = 0;
    const struct ctl_opt opts[] = {{"--state", &state, NULL}, {"--session", &session, NULL},
                                   {"--app", &app, NULL},     {"--limit", &limit_text, NULL},
                                   {"--live", NULL, &live},   {0}};
    const struct ctl_command *cmd = ctl_find_command("sandboxes");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if (limit_text && ctl_parse_count(limit_text, &limit) != 0)
        return ctl_usage_error(cmd, "--limit must be a number, not \"%s\"", limit_text);
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    return emit_rows(ctl,
                     ctl_query(ctl,
                               "SELECT " SANDBOX_COLS_SQL " FROM" SANDBOX_FROM_SQL
                               "WHERE (?1 IS NULL OR l.state = ?1) "
                               "AND (?2 IS NULL OR l.session_id = ?2) "
                               "AND (?3 IS NULL OR l.app_id = ?3) "
                               "AND (NOT ?4 OR l.state NOT IN ('terminated', 'failed')) "
                               "ORDER BY l.created_at, l.sandbox_id LIMIT ?5",
                               "sssii", state, session, app, (int64_t)live,
                               limit > 0 ? limit : (int64_t)-1),
                     sandbox_cols);
}

static const struct ctl_col sandbox_fields[] = {{"sandbox_id", "id:"},
                                                {"state", "state:"},
                                                {"driver", "driver:"},
                                                {"image", "image:"},
                                                {"image_hash", "image hash:"},
                                                {"vcpu_count", "vcpus:"},
                                                {"mem_size_mib", "memory (MiB):"},
                                                {"worker_id", "worker:"},
                                                {"app_id", "app:"},
                                                {"session_id", "session:"},
                                                {"activation", "from pool:"},
                                                {"boot_ms", "boot (ms):"},
                                                {"created_utc", "created:"},
                                                {"ready_utc", "ready:"},
                                                {"claimed_utc", "claimed:"},
                                                {"stop_requested_utc", "stop requested:"},
                                                {"terminated_utc", "terminated:"},
                                                {"lifetime_ms", "lifetime (ms):"},
                                                {"served_ms", "served (ms):"},
                                                {"termination_reason", "reason:"},
                                                {"cpu_usec", "cpu (us):"},
                                                {"mem_peak_bytes", "mem peak (bytes):"},
                                                {"messages_served", "messages:"},
                                                {"callback_calls", "callbacks:"},
                                                {"callback_last_utc", "last callback:"},
                                                {"pid", "pid:"},
                                                {"jail_dir", "jail:"},
                                                {"cgroup_path", "cgroup:"},
                                                {"net_address", "address:"},
                                                {0}};

static const struct ctl_col event_cols[] = {
    {"at_utc", "TIME"},        {"actor", "ACTOR"},        {"kind", "KIND"}, {"object_id", "OBJECT"},
    {"session_id", "SESSION"}, {"request_id", "REQUEST"}, {"data", "DATA"}, {0}};

/* Asks the gateway to terminate the Sandbox. */
static int terminate_sandbox(struct ctl *ctl, const char *id)
{
    char path[160], err[512];
    int status = 0;
    char *body = NULL;
    snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
    if (ctl_http(ctl, "DELETE", path, &status, &body, err, sizeof err) != 0) {
        fprintf(stderr, "sbxctl: cannot ask the gateway to terminate %s: %s\n", id, err);
        return CTL_ERROR;
    }
    int rc;
    if (status == 202) {
        if (ctl->json)
            printf("%s\n", body ? body : "{}");
        else
            printf("termination of %s requested; its worker stops it shortly (follow with "
                   "`sbxctl sandbox %s`)\n",
                   id, id);
        rc = CTL_OK;
    } else {
        json_t *problem = body ? json_loads(body, 0, NULL) : NULL;
        const char *detail = json_string_value(json_object_get(problem, "detail"));
        fprintf(stderr, "sbxctl: the gateway answered %d: %s\n", status,
                detail ? detail : (body ? body : ""));
        json_decref(problem);
        rc = status == 404 || status == 409 ? CTL_FAIL : CTL_ERROR;
    }
    free(body);
    return rc;
}

int cmd_sandbox(struct ctl *ctl, int argc, char **argv)
{
    bool terminate = false;
    const struct ctl_opt opts[] = {{"--terminate", NULL, &terminate}, {0}};
    const struct ctl_command *cmd = ctl_find_command("sandbox");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1)
        return ctl_usage_error(cmd, "which Sandbox? give its id");
    if (terminate)
        return terminate_sandbox(ctl, pos[0]);
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    json_t *sb =
        ctl_query_one(ctl,
                      "SELECT " SANDBOX_COLS_SQL ", cb.image_hash, cb.pid, cb.jail_dir, "
                      "cb.cgroup_path, cb.net_address, cb.stop_requested_at, " SANDBOX_STOP_UTC
                      " AS stop_requested_utc FROM" SANDBOX_FROM_SQL "WHERE l.sandbox_id = ?1",
                      "s", pos[0]);
    if (!sb)
        return CTL_ERROR;
    if (json_is_null(sb)) {
        fprintf(stderr, "sbxctl: no Sandbox \"%s\"\n", pos[0]);
        return CTL_FAIL;
    }
    json_t *messages = ctl_query(ctl,
                                 "SELECT * FROM message_deliveries WHERE sandbox_id = ?1 "
                                 "ORDER BY created_at, seq",
                                 "s", pos[0]);
    json_t *events = ctl_query(
        ctl,
        "SELECT id, at, " UTC("at") " AS at_utc, actor, kind, object_type, "
                                    "object_id, app_id, session_id, request_id, data FROM events "
                                    "WHERE (object_id = ?1 OR (json_valid(data) AND "
                                    "json_extract(data, '$.sandboxId') = ?1)) AND kind != "
                                    "'sandbox.egress_denied' ORDER BY id",
        "s", pos[0]);
    /* The firewall's last refusals, newest first: rate-limited at the source, the
     * suppressed ones counted in each row. */
    json_t *denials = ctl_query(
        ctl,
        "SELECT * FROM (SELECT id, " UTC("at") " AS at_utc, json_extract(data, '$.destination') "
                                               "AS destination, json_extract(data, '$.port') AS "
                                               "port, json_extract(data, '$.protocol') AS "
                                               "protocol, json_extract(data, '$.rule') AS rule, "
                                               "json_extract(data, '$.suppressed') AS suppressed "
                                               "FROM events WHERE object_id = ?1 AND kind = "
                                               "'sandbox.egress_denied' ORDER BY id DESC LIMIT "
                                               "20) ORDER BY id DESC",
        "s", pos[0]);
    json_t *violations = ctl_query(ctl,
                                   "SELECT * FROM sandbox_reuse_violations WHERE sandbox_id "
                                   "= ?1",
                                   "s", pos[0]);
    rc = CTL_OK;
    if (!messages || !events || !violations || !denials) {
        rc = CTL_ERROR;
    } else if (ctl->json) {
        json_t *all = json_pack("{sOsOsOsOsO}", "sandbox", sb, "messages", messages, "events",
                                events, "violations", violations, "denials", denials);
        ctl_print_json(all, false);
        json_decref(all);
    } else {
        static const struct ctl_col violation_cols[] = {
            {"violation", "VIOLATION"}, {"session_ids", "SESSIONS"}, {"detail", "DETAIL"}, {0}};
        printf("Sandbox %s\n", pos[0]);
        ctl_print_fields(ctl, sb, sandbox_fields);
        printf("\nMessages it served (%zu)\n", json_array_size(messages));
        ctl_print_table(ctl, messages, message_cols);
        printf("\nEvents (%zu)\n", json_array_size(events));
        ctl_print_table(ctl, events, event_cols);
        static const struct ctl_col denial_cols[] = {{"at_utc", "TIME"},
                                                     {"destination", "DESTINATION"},
                                                     {"port", "PORT"},
                                                     {"protocol", "PROTO"},
                                                     {"rule", "RULE"},
                                                     {"suppressed", "SUPPRESSED"},
                                                     {0}};
        if (json_array_size(denials) > 0) {
            printf("\nLast egress denials (%zu, newest first)\n", json_array_size(denials));
            ctl_print_table(ctl, denials, denial_cols);
        }
        if (json_array_size(violations) > 0) {
            printf("\nINTEGRITY VIOLATIONS (%zu)\n", json_array_size(violations));
            ctl_print_table(ctl, violations, violation_cols);
        }
    }
    json_decref(sb);
    json_decref(messages);
    json_decref(events);
    json_decref(violations);
    json_decref(denials);
    return rc;
}

/* ---- messages ---- */

int cmd_messages(struct ctl *ctl, int argc, char **argv)
{
    const char *session = NULL, *state = NULL, *limit_text = NULL;
    int64_t limit = 100;
    const struct ctl_opt opts[] = {{"--session", &session, NULL},
                                   {"--state", &state, NULL},
                                   {"--limit", &limit_text, NULL},
                                   {0}};
    const struct ctl_command *cmd = ctl_find_command("messages");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if (limit_text && ctl_parse_count(limit_text, &limit) != 0)
        return ctl_usage_error(cmd, "--limit must be a number, not \"%s\"", limit_text);
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    static const struct ctl_col cols[] = {{"message_id", "ID"},
                                          {"session_id", "SESSION"},
                                          {"seq", "SEQ"},
                                          {"state", "STATE"},
                                          {"attempts", "ATTEMPTS"},
                                          {"sandbox_id", "SANDBOX"},
                                          {"created_utc", "CREATED"},
                                          {"latency_ms", "LATENCY-MS"},
                                          {"error", "ERROR"},
                                          {0}};
    /* The newest `limit`, shown oldest first. */
    return emit_rows(ctl,
                     ctl_query(ctl,
                               "SELECT * FROM (SELECT d.*, m.body, m.reply, m.idempotency_key "
                               "FROM message_deliveries d JOIN messages m ON m.id = d.message_id "
                               "WHERE (?1 IS NULL OR d.session_id = ?1) "
                               "AND (?2 IS NULL OR d.state = ?2) "
                               "ORDER BY d.created_at DESC, d.seq DESC LIMIT ?3) "
                               "ORDER BY created_at, seq",
                               "ssi", session, state, limit > 0 ? limit : (int64_t)-1),
                     cols);
}

/* ---- pool ---- */

int cmd_pool(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("pool");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, NULL, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    static const struct ctl_col cols[] = {{"driver", "DRIVER"},
                                          {"image", "IMAGE"},
                                          {"vcpu_count", "VCPU"},
                                          {"mem_size_mib", "MEM-MIB"},
                                          {"warm", "WARM"},
                                          {"booting", "BOOTING"},
                                          {"in_use", "IN-USE"},
                                          {"stopping", "STOPPING"},
                                          {"target", "TARGET"},
                                          {"cold_activations", "COLD"},
                                          {"warm_activations", "WARM-CLAIMS"},
                                          {"boot_failures", "BOOT-FAIL"},
                                          {"boot_ms_avg", "BOOT-MS-AVG"},
                                          {"boot_ms_max", "BOOT-MS-MAX"},
                                          {0}};
    /* Shapes: those of live Apps (what the pool keeps ready) and of any live Sandbox. A boot
     * failure is a Sandbox that failed before it was ever ready. */
    return emit_rows(
        ctl,
        ctl_query(ctl,
                  "WITH shapes AS (SELECT driver, image, vcpu_count, mem_size_mib FROM apps "
                  "WHERE deleted_at IS NULL UNION SELECT driver, image, vcpu_count, mem_size_mib "
                  "FROM sandboxes WHERE state NOT IN ('terminated', 'failed')) "
                  "SELECT sh.driver, sh.image, sh.vcpu_count, sh.mem_size_mib, "
                  "count(CASE WHEN b.state = 'warm' THEN 1 END) AS warm, "
                  "count(CASE WHEN b.state = 'booting' THEN 1 END) AS booting, "
                  "count(CASE WHEN b.state IN ('claimed', 'running') THEN 1 END) AS in_use, "
                  "count(CASE WHEN b.state = 'stopping' THEN 1 END) AS stopping, "
                  "?1 AS target, "
                  "count(CASE WHEN b.cold AND b.session_id IS NOT NULL THEN 1 END) AS "
                  "cold_activations, "
                  "count(CASE WHEN NOT b.cold AND b.session_id IS NOT NULL THEN 1 END) AS "
                  "warm_activations, "
                  "count(CASE WHEN b.state = 'failed' AND b.ready_at IS NULL THEN 1 END) AS "
                  "boot_failures, "
                  "CAST(avg(b.boot_ms) AS INTEGER) AS boot_ms_avg, max(b.boot_ms) AS boot_ms_max "
                  "FROM shapes sh LEFT JOIN sandboxes b ON b.driver = sh.driver AND b.image = "
                  "sh.image AND b.vcpu_count = sh.vcpu_count AND b.mem_size_mib = "
                  "sh.mem_size_mib "
                  "GROUP BY sh.driver, sh.image, sh.vcpu_count, sh.mem_size_mib "
                  "ORDER BY sh.driver, sh.image, sh.vcpu_count, sh.mem_size_mib",
                  "i", ctl->cfg.pool_size),
        cols);
}

/* ---- hosts ---- */

int cmd_hosts(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("hosts");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, NULL, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    static const struct ctl_col cols[] = {{"host_id", "HOST"},
                                          {"state", "STATE"},
                                          {"address", "ADDRESS"},
                                          {"capacity", "CAPACITY"},
                                          {"workers", "WORKERS"},
                                          {"serving", "SERVING"},
                                          {"live_sandboxes", "SANDBOXES"},
                                          {"heartbeat_utc", "HEARTBEAT"},
                                          {"lost_utc", "LOST"},
                                          {0}};
    /* Serving: Sessions activating or active on the host (what placement weighs against its
     * capacity). */
    return emit_rows(
        ctl,
        ctl_query(ctl,
                  "SELECT h.id AS host_id, "
                  "CASE WHEN h.lost_at IS NOT NULL THEN 'lost' WHEN h.heartbeat_at < "
                  "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - ?1 "
                  "THEN 'stale' ELSE 'live' END AS state, h.address, h.capacity, "
                  "(SELECT count(*) FROM workers w WHERE w.host_id = h.id AND w.stopped_at IS "
                  "NULL) AS workers, "
                  "(SELECT count(*) FROM workers w JOIN sessions s ON s.worker_id = w.id WHERE "
                  "w.host_id = h.id AND s.state IN ('activating', 'active')) AS serving, "
                  "(SELECT count(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE "
                  "w.host_id = h.id AND b.state NOT IN ('terminated', 'failed')) AS "
                  "live_sandboxes, "
                  "strftime('%Y-%m-%dT%H:%M:%fZ', h.heartbeat_at / 1000.0, 'unixepoch') AS "
                  "heartbeat_utc, "
                  "strftime('%Y-%m-%dT%H:%M:%fZ', h.lost_at / 1000.0, 'unixepoch') AS lost_utc, "
                  "h.heartbeat_at, h.lost_at, h.registered_at FROM hosts h ORDER BY h.id",
                  "i", ctl->cfg.host_lost_ms),
        cols);
}

/* ---- keys ---- */

int cmd_keys(struct ctl *ctl, int argc, char **argv)
{
    const char *app = NULL;
    bool history = false;
    const struct ctl_opt opts[] = {{"--app", &app, NULL}, {"--history", NULL, &history}, {0}};
    const struct ctl_command *cmd = ctl_find_command("keys");
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    if (history) {
        static const struct ctl_col cols[] = {
            {"at_utc", "TIME"},  {"action", "ACTION"},      {"key_id", "KEY"},
            {"app_name", "APP"}, {"key_name", "NAME"},      {"prefix", "PREFIX"},
            {"actor", "ACTOR"},  {"request_id", "REQUEST"}, {0}};
        return emit_rows(ctl,
                         ctl_query(ctl,
                                   "SELECT * FROM key_audit WHERE ?1 IS NULL OR app_id = ?1 "
                                   "ORDER BY at, key_id, action",
                                   "s", app),
                         cols);
    }
    static const struct ctl_col cols[] = {{"id", "ID"},
                                          {"app_name", "APP"},
                                          {"name", "NAME"},
                                          {"prefix", "PREFIX"},
                                          {"status", "STATUS"},
                                          {"created_utc", "CREATED"},
                                          {"revoked_utc", "REVOKED"},
                                          {0}};
    return emit_rows(
        ctl,
        ctl_query(ctl,
                  "SELECT k.id, k.app_id, a.name AS app_name, k.name, k.prefix, "
                  "CASE WHEN k.revoked_at IS NULL THEN 'active' ELSE 'revoked' END "
                  "AS status, k.created_at, " UTC(
                      "k.created_at") " AS created_utc, "
                                      "k.revoked_at, " UTC(
                                          "k.revoked_at") " AS revoked_utc "
                                                          "FROM api_keys k LEFT JOIN apps a ON "
                                                          "a.id = k.app_id "
                                                          "WHERE ?1 IS NULL OR k.app_id = ?1 ORDER "
                                                          "BY k.created_at, k.id",
                  "s", app),
        cols);
}

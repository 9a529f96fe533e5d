/*
 * sbxctl_events.c: `sbxctl events`: the audit trail, filtered by Session, object, kind and time,
 * and --follow, which prints new events as they are committed, like `tail -f`, until SIGINT or
 * SIGTERM: from the gateway's live event feed (GET /v1/events as text/event-stream, with the admin
 * token), or, without a token or a reachable gateway, by polling the (append-only, id-ordered)
 * events table for rows after the last one printed.
 */
#include "sbxctl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop_following;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_following = 1;
}

#define EVENT_FIELDS                                                                               \
    "id, at, strftime('%Y-%m-%dT%H:%M:%fZ', at / 1000.0, 'unixepoch') AS at_utc, actor, kind, "    \
    "object_type, object_id, app_id, session_id, request_id, data "
#define EVENT_FILTER                                                                               \
    "WHERE (?1 IS NULL OR session_id = ?1) AND (?2 IS NULL OR object_id = ?2) "                    \
    "AND (?3 IS NULL OR kind = ?3 OR kind LIKE ?3 || '.%') AND at >= ?4 AND at < ?5 AND id > ?6 "

struct event_filter {
    const char *session, *object, *kind;
    int64_t since, until, after_id, limit;
};

/* The events that match f: the first `limit` after f->since, or the last `limit` when tail. */
static json_t *query_events(struct ctl *ctl, const struct event_filter *f, bool tail)
{
    int64_t limit = f->limit > 0 ? f->limit : -1;
    if (tail)
        return ctl_query(ctl,
                         "SELECT * FROM (SELECT " EVENT_FIELDS "FROM events " EVENT_FILTER
                         "ORDER BY id DESC LIMIT ?7) ORDER BY id",
                         "sssiiii", f->session, f->object, f->kind, f->since, f->until, f->after_id,
                         limit);
    return ctl_query(ctl, "SELECT " EVENT_FIELDS "FROM events " EVENT_FILTER "ORDER BY id LIMIT ?7",
                     "sssiiii", f->session, f->object, f->kind, f->since, f->until, f->after_id,
                     limit);
}

/* One event per line with fixed columns, so that --follow output stays aligned. */
static void print_event_line(const struct ctl *ctl, json_t *e)
{
    char *data = ctl_cell_text(json_object_get(e, "data"));
    char *obj = ctl_cell_text(json_object_get(e, "object_id"));
    char *ses = ctl_cell_text(json_object_get(e, "session_id"));
    char *req = ctl_cell_text(json_object_get(e, "request_id"));
    for (char *p = data; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    if (!ctl->wide && strlen(data) > 100)
        strcpy(data + 97, "...");
    printf("%-8lld %-24s %-30s %-24s %-28s %-28s %-24s %s\n",
           (long long)json_integer_value(json_object_get(e, "id")),
           json_string_value(json_object_get(e, "at_utc")),
           json_string_value(json_object_get(e, "actor")),
           json_string_value(json_object_get(e, "kind")), obj, ses, req, data);
    free(data);
    free(obj);
    free(ses);
    free(req);
}

static void print_events(const struct ctl *ctl, json_t *rows, bool follow)
{
    size_t i;
    json_t *e;
    if (ctl->json && !follow) {
        ctl_print_json(rows, false);
        return;
    }
    json_array_foreach(rows, i, e)
    {
        if (ctl->json)
            ctl_print_json(e, true);
        else
            print_event_line(ctl, e);
    }
    fflush(stdout);
}

static int64_t last_id(json_t *rows, int64_t before)
{
    size_t n = json_array_size(rows);
    return n ? json_integer_value(json_object_get(json_array_get(rows, n - 1), "id")) : before;
}

/* Milliseconds since the epoch of the API's "2026-12-01T09:23:35.378Z" (0 when unreadable). */
static int64_t iso_ms(const char *s)
{
    struct tm tm = {0};
    int ms = 0;
    if (!s || sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                     &tm.tm_min, &tm.tm_sec, &ms) < 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

struct feed_follow {
    struct ctl *ctl;
    struct event_filter *f;
};

/* One event of the gateway's feed, printed like a row of the events table. */
static void on_feed_event(void *arg, const char *id, const char *data)
{
    struct feed_follow *ff = arg;
    const struct event_filter *f = ff->f;
    json_t *e = json_loads(data, 0, NULL);
    (void)id;
    if (!json_is_object(e)) {
        json_decref(e);
        return;
    }
    const char *kind = json_string_value(json_object_get(e, "kind"));
    const char *object = json_string_value(json_object_get(e, "objectId"));
    int64_t at = iso_ms(json_string_value(json_object_get(e, "at")));
    size_t kl = f->kind ? strlen(f->kind) : 0;
    bool match = (!f->object || (object && strcmp(object, f->object) == 0)) &&
                 (!f->kind || (kind && (strcmp(kind, f->kind) == 0 ||
                                        (strncmp(kind, f->kind, kl) == 0 && kind[kl] == '.')))) &&
                 at < f->until;
    ff->f->after_id = json_integer_value(json_object_get(e, "id"));
    if (match) {
        json_t *row = json_pack(
            "{s:O, s:I, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "id",
            json_object_get(e, "id"), "at", (json_int_t)at, "at_utc", json_object_get(e, "at"),
            "actor", json_object_get(e, "actor"), "kind", json_object_get(e, "kind"), "object_type",
            json_object_get(e, "objectType"), "object_id", json_object_get(e, "objectId"), "app_id",
            json_object_get(e, "appId"), "session_id", json_object_get(e, "sessionId"),
            "request_id", json_object_get(e, "requestId"), "data", json_object_get(e, "data"));
        if (row) {
            if (ff->ctl->json)
                ctl_print_json(row, true);
            else
                print_event_line(ff->ctl, row);
            fflush(stdout);
        }
        json_decref(row);
    }
    json_decref(e);
}

/* Ids as the gateway accepts them: only then is one put into a request line. */
static bool plain_id(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* Prints what the database has after f->after_id; false on a read error. */
static bool poll_once(struct ctl *ctl, struct event_filter *f)
{
    f->limit = 1000;
    json_t *rows = query_events(ctl, f, false);
    if (!rows)
        return false;
    print_events(ctl, rows, true);
    f->after_id = last_id(rows, f->after_id);
    json_decref(rows);
    return true;
}

static int follow_events(struct ctl *ctl, struct event_filter *f)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: a blocked read returns at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char path[160], err[256];
    bool feed = ctl->cfg.admin_token[0] != '\0' && (!f->session || plain_id(f->session));
    snprintf(path, sizeof path, "/v1/events%s%s", f->session ? "?sessionId=" : "",
             f->session ? f->session : "");
    bool said = false;
    while (!stop_following) {
        if (feed) {
            struct feed_follow ff = {ctl, f};
            if (!said)
                fprintf(stderr, "sbxctl: following the gateway's event feed at %s\n",
                        ctl->cfg.listen);
            said = true;
            if (ctl_http_stream(ctl, path, f->after_id, on_feed_event, &ff, &stop_following, err,
                                sizeof err) == 0)
                break;
            fprintf(stderr, "sbxctl: event feed: %s; reading the database until it is back\n", err);
        }
        /* Without the feed: polling is the honest way for a read-only reader, and a 250 ms
         * poll of an indexed id range costs nothing. With it: catch up, then try it again. */
        for (int i = 0; i < (feed ? 4 : 1) && !stop_following; i++) {
            struct timespec pause = {0, 250 * 1000 * 1000};
            nanosleep(&pause, NULL);
            if (!stop_following && !poll_once(ctl, f))
                return CTL_ERROR;
        }
    }
    return CTL_OK;
}

int cmd_events(struct ctl *ctl, int argc, char **argv)
{
    const char *session = NULL, *object = NULL, *kind = NULL, *since = NULL, *until = NULL,
               *after = NULL, *limit_text = NULL;
    bool follow = false;
    const struct ctl_opt opts[] = {
        {"--session", &session, NULL},  {"--object", &object, NULL}, {"--kind", &kind, NULL},
        {"--since", &since, NULL},      {"--until", &until, NULL},   {"--after-id", &after, NULL},
        {"--limit", &limit_text, NULL}, {"--follow", NULL, &follow}, {0}};
    const struct ctl_command *cmd = ctl_find_command("events");
    struct event_filter f = {.until = INT64_MAX, .limit = 100};
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if (limit_text && ctl_parse_count(limit_text, &f.limit) != 0)
        return ctl_usage_error(cmd, "--limit must be a number, not \"%s\"", limit_text);
    if (after && ctl_parse_count(after, &f.after_id) != 0)
        return ctl_usage_error(cmd, "--after-id must be an event id, not \"%s\"", after);
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    if (since && ctl_parse_time(ctl, since, &f.since) != 0)
        return ctl_usage_error(cmd, "--since: cannot read \"%s\" as a time", since);
    if (until && ctl_parse_time(ctl, until, &f.until) != 0)
        return ctl_usage_error(cmd, "--until: cannot read \"%s\" as a time", until);
    f.session = session;
    f.object = object;
    f.kind = kind;

    json_t *rows = query_events(ctl, &f, !since && !after);
    if (!rows)
        return CTL_ERROR;
    if (!ctl->json)
        printf("%-8s %-24s %-30s %-24s %-28s %-28s %-24s %s\n", "ID", "TIME", "ACTOR", "KIND",
               "OBJECT", "SESSION", "REQUEST", "DATA");
    print_events(ctl, rows, follow);
    if (!ctl->json && !follow && json_array_size(rows) == 0)
        printf("(none)\n");
    f.after_id = last_id(rows, f.after_id);
    json_decref(rows);
    return follow ? follow_events(ctl, &f) : CTL_OK;
}

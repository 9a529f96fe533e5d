/*
 * sbxctl_events.c: `sbxctl events`: the audit trail, filtered by Session, object, kind and time,
 * and --follow, which polls the (append-only, id-ordered) events table for rows after the last
 * one printed, like `tail -f`, until SIGINT or SIGTERM.
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

static int follow_events(struct ctl *ctl, struct event_filter *f)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Polling is the honest way for a read-only reader: sbx's wake-ups go only to its own
     * processes, and a 250 ms poll of an indexed id range costs nothing. */
    while (!stop_following) {
        struct timespec pause = {0, 250 * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (stop_following)
            break;
        f->limit = 1000;
        json_t *rows = query_events(ctl, f, false);
        if (!rows)
            return CTL_ERROR;
        print_events(ctl, rows, true);
        f->after_id = last_id(rows, f->after_id);
        json_decref(rows);
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

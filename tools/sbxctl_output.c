/*
 * sbxctl_output.c: running a query into JSON rows, and printing rows as human tables, as
 * "label: value" blocks or as JSON. Every subcommand goes query -> JSON rows -> one of the two
 * outputs, so --json and the tables always show the same data.
 */
#include "sbxctl.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text columns that hold JSON written by sbx: embedded as JSON in --json output. */
static const char *const json_columns[] = {"body", "reply", "data", "metadata", "command", NULL};

static bool is_json_column(const char *name)
{
    for (const char *const *p = json_columns; *p; p++)
        if (strcmp(*p, name) == 0)
            return true;
    return false;
}

static json_t *column_value(sqlite3_stmt *s, int col)
{
    switch (sqlite3_column_type(s, col)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(s, col));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(s, col));
    case SQLITE_NULL:
        return json_null();
    default: {
        const char *text = (const char *)sqlite3_column_text(s, col);
        if (is_json_column(sqlite3_column_name(s, col))) {
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            if (v)
                return v;
        }
        return json_string(text ? text : "");
    }
    }
}

static json_t *query_v(struct ctl *ctl, const char *sql, const char *types, va_list ap)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(ctl->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        fprintf(stderr, "sbxctl: query failed: %s\n", sqlite3_errmsg(ctl->db));
        if (strstr(sqlite3_errmsg(ctl->db), "no such"))
            fprintf(stderr, "sbxctl: the database lacks a table or view this sbxctl needs: is it "
                            "older than sbxctl? (`sbxctl db check` tells; starting sbx migrates "
                            "it)\n");
        return NULL;
    }
    for (int i = 0; types && types[i]; i++) {
        if (types[i] == 'i') {
            sqlite3_bind_int64(s, i + 1, va_arg(ap, int64_t));
        } else {
            const char *v = va_arg(ap, const char *);
            if (v)
                sqlite3_bind_text(s, i + 1, v, -1, SQLITE_TRANSIENT);
            else
                sqlite3_bind_null(s, i + 1);
        }
    }
    json_t *rows = json_array();
    int ncol = sqlite3_column_count(s);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int c = 0; c < ncol; c++)
            json_object_set_new(row, sqlite3_column_name(s, c), column_value(s, c));
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "sbxctl: query failed: %s\n", sqlite3_errmsg(ctl->db));
        json_decref(rows);
        rows = NULL;
    }
    sqlite3_finalize(s);
    return rows;
}

json_t *ctl_query(struct ctl *ctl, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    json_t *rows = query_v(ctl, sql, types, ap);
    va_end(ap);
    return rows;
}

json_t *ctl_query_one(struct ctl *ctl, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    json_t *rows = query_v(ctl, sql, types, ap);
    va_end(ap);
    if (!rows)
        return NULL;
    json_t *one = json_array_size(rows) > 0 ? json_incref(json_array_get(rows, 0)) : json_null();
    json_decref(rows);
    return one;
}

char *ctl_cell_text(json_t *v)
{
    char buf[64];
    if (!v || json_is_null(v))
        return strdup("-");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return strdup(buf);
    }
    if (json_is_real(v)) {
        snprintf(buf, sizeof buf, "%.1f", json_real_value(v));
        return strdup(buf);
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? s : strdup("?");
}

/* Cells are shown on one line: control characters become spaces, and long ones are shortened
 * unless --wide. */
#define CELL_MAX 60

static char *display_cell(const struct ctl *ctl, json_t *v)
{
    char *t = ctl_cell_text(v);
    for (char *p = t; *p; p++)
        if (iscntrl((unsigned char)*p))
            *p = ' ';
    if (!ctl->wide && strlen(t) > CELL_MAX)
        strcpy(t + CELL_MAX - 3, "...");
    return t;
}

void ctl_print_table(const struct ctl *ctl, json_t *rows, const struct ctl_col *cols)
{
    size_t ncols = 0, nrows = json_array_size(rows);
    while (cols[ncols].key)
        ncols++;
    size_t *width = calloc(ncols, sizeof *width);
    char **cells = calloc(nrows * ncols + 1, sizeof *cells);
    if (!width || !cells) {
        fprintf(stderr, "sbxctl: out of memory\n");
        free(width);
        free(cells);
        return;
    }
    for (size_t c = 0; c < ncols; c++)
        width[c] = strlen(cols[c].header);
    for (size_t r = 0; r < nrows; r++) {
        for (size_t c = 0; c < ncols; c++) {
            char *t = display_cell(ctl, json_object_get(json_array_get(rows, r), cols[c].key));
            cells[r * ncols + c] = t;
            if (strlen(t) > width[c])
                width[c] = strlen(t);
        }
    }
    for (size_t c = 0; c < ncols; c++)
        printf("%-*s%s", c + 1 < ncols ? (int)width[c] : 0, cols[c].header,
               c + 1 < ncols ? "  " : "\n");
    for (size_t r = 0; r < nrows; r++)
        for (size_t c = 0; c < ncols; c++)
            printf("%-*s%s", c + 1 < ncols ? (int)width[c] : 0, cells[r * ncols + c],
                   c + 1 < ncols ? "  " : "\n");
    if (nrows == 0)
        printf("(none)\n");
    for (size_t i = 0; i < nrows * ncols; i++)
        free(cells[i]);
    free(cells);
    free(width);
}

void ctl_print_fields(const struct ctl *ctl, json_t *obj, const struct ctl_col *cols)
{
    size_t w = 0;
    for (const struct ctl_col *c = cols; c->key; c++)
        if (strlen(c->header) > w)
            w = strlen(c->header);
    for (const struct ctl_col *c = cols; c->key; c++) {
        char *t = display_cell(ctl, json_object_get(obj, c->key));
        printf("  %-*s  %s\n", (int)w + 1, c->header, t);
        free(t);
    }
}

void ctl_print_json(json_t *v, bool one_line)
{
    char *s = json_dumps(v, (one_line ? JSON_COMPACT : JSON_INDENT(2)) | JSON_ENCODE_ANY);
    if (s) {
        puts(s);
        free(s);
    }
    fflush(stdout);
}

/* "15m" -> 900000; -1 when text is not a number followed by s, m, h or d. */
static int64_t parse_duration_ms(const char *text)
{
    char *end;
    long long n = strtoll(text, &end, 10);
    if (end == text || n < 0 || end[0] == '\0' || end[1] != '\0')
        return -1;
    switch (end[0]) {
    case 's':
        return n * 1000;
    case 'm':
        return n * 60 * 1000;
    case 'h':
        return n * 3600 * 1000;
    case 'd':
        return n * 86400 * 1000;
    default:
        return -1;
    }
}

int ctl_parse_time(struct ctl *ctl, const char *text, int64_t *ms)
{
    int64_t d = parse_duration_ms(text);
    const char *expr = text;
    json_t *row;

    if (d >= 0) {
        row = ctl_query_one(ctl,
                            "SELECT CAST(round((julianday('now') - 2440587.5) * 86400000) AS "
                            "INTEGER) - ?1 AS ms",
                            "i", d);
    } else {
        if (ctl_parse_count(text, ms) == 0)
            return 0;
        /* SQLite's own date parser: ISO 8601 with optional Z or offset, and 'now'. */
        if (strcmp(text, "today") == 0)
            expr = "start of day";
        row = strcmp(text, "yesterday") == 0
                  ? ctl_query_one(ctl,
                                  "SELECT CAST(round((julianday('now', 'start of day', '-1 day') "
                                  "- 2440587.5) * 86400000) AS INTEGER) AS ms",
                                  NULL)
              : strcmp(expr, "start of day") == 0
                  ? ctl_query_one(ctl,
                                  "SELECT CAST(round((julianday('now', 'start of day') "
                                  "- 2440587.5) * 86400000) AS INTEGER) AS ms",
                                  NULL)
                  : ctl_query_one(ctl,
                                  "SELECT CAST(round((julianday(?1) - 2440587.5) * 86400000) AS "
                                  "INTEGER) AS ms",
                                  "s", text);
    }
    if (!row)
        return -1;
    json_t *v = json_object_get(row, "ms");
    int ok = json_is_integer(v);
    if (ok)
        *ms = json_integer_value(v);
    json_decref(row);
    return ok ? 0 : -1;
}

/*
 * sql_pg_internal.h: what the PostgreSQL engine's files share and nothing else includes: its
 * connection, statement and store records, and each file's calls the others use.
 *   sql_pg.c       transactions, the engine's table (pg_engine), opening, closing, migrations
 *   sql_pg_conn.c  the URL, connections (one per thread, replaced after a restart), SQLSTATEs
 *                  mapped to store statuses, and sending queries (pipelined, with their commands)
 *   sql_pg_stmt.c  statements: ?N rewritten to $N, prepared per type signature, bound, executed
 *                  and read
 */
#ifndef SBX_SQL_PG_INTERNAL_H
#define SBX_SQL_PG_INTERNAL_H

#include "sql_pg.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type oids of the parameters we send (pg_type.h is not in libpq-dev's public headers). */
#define PG_OID_BYTEA 17
#define PG_OID_INT8 20
#define PG_OID_TEXT 25
#define PG_OID_TEXT_ARRAY 1009

#define PG_STMT_SLOTS 512 /* per-connection statement table (open addressing); power of two */
#define PG_STMT_MAX 384   /* beyond this the table would get slow; the store has ~100 */
#define PG_VARIANTS 4     /* prepared type signatures per statement */
#define PG_PENDING_MAX 8  /* commands held back per connection (BEGIN, lock, savepoints) */
#define PG_PENDING_LEN 64
#define PG_IDLE_IN_TXN_TIMEOUT_MS 30000 /* see pg_session_setup_sql() */

struct pg_conn;

/* One parameter's storage: copied text or blob bytes, or an int64's digits. Reused between
 * executions, so a statement bound in a loop allocates only when a value outgrows its buffer. */
struct pg_param_buf {
    char *data;
    size_t cap;
    char digits[24];
};

struct pg_variant {
    Oid *types; /* nparams type oids this variant was prepared with */
    char name[24];
};

struct pg_stmt {
    struct sql_stmt base;
    struct pg_conn *conn;
    const char *key; /* the store's SQL text (its address is the cache key) */
    char *text;      /* the same with $N for ?N */
    int nparams;
    bool read_only;   /* a plain SELECT: safe to run again after a lost connection */
    bool bind_failed; /* a value could not be bound (out of memory): the step fails */
    /* The current bindings, in PQexecPrepared's form. */
    Oid *types;
    const char **values;
    int *lengths;
    int *formats;
    Oid *null_types; /* each parameter's last bound type, for NULLs: see pg_bind_null() */
    struct pg_param_buf *bufs;
    int nvariants;
    struct pg_variant variants[PG_VARIANTS];
    /* The execution: run once by the first step after binding. */
    bool ran;
    PGresult *res;
    int row; /* the current row; -1 before the first step */
    int nrows;
};

struct pg_conn {
    PGconn *db;
    struct pg_conn *next;
    struct pg_store *store;
    /* Between begin() and commit()/rollback(): a lost connection is not replaced meanwhile, since
     * the statements that follow would run outside the transaction they belong to. */
    bool in_txn;
    int64_t changes;
    enum store_status last_status; /* of the last failure on this connection */
    char last_sqlstate[6];
    char last_error[512];
    /* Commands held back until the transaction's next statement, which carries them in the same
     * round trip: its BEGIN (see pg_begin()) and savepoint commands (see pg_exec()). */
    int npending;
    char pending[PG_PENDING_MAX][PG_PENDING_LEN];
    /* begin() held back its BEGIN (first among pending): the transaction has not reached the
     * server yet, so a connection found dead can be replaced and everything sent again. */
    bool begin_pending;
    /* The statement being run is the transaction's last (pg_step_commit()): its COMMIT goes with
     * it. Once that statement succeeded, committed_ahead is set and ahead_status is the COMMIT's
     * outcome, which commit() reports: the transaction is over on the server. */
    bool commit_ahead;
    bool committed_ahead;
    enum store_status ahead_status;
    unsigned next_prepared; /* names prepared statements uniquely within the session */
    unsigned nstmts;
    struct pg_stmt *slots[PG_STMT_SLOTS];
};

struct pg_store {
    struct sql_store base; /* first: the store's cls is a struct sql_store */
    char *url;
    char *safe_url;          /* without password, for messages */
    char write_lock[64];     /* the writers' lock, exclusive: serial writers */
    char shared_lock[64];    /* the same lock, shared: concurrent writers and single writes */
    char session_setup[512]; /* see pg_session_setup() */
    pthread_key_t conn_key;
    pthread_mutex_t conns_lock;
    struct pg_conn *conns; /* every open connection, to close them all */
};

/* One query to send: a prepared statement (name), or text with parameters (types may be NULL). */
struct pg_query {
    const char *name;
    const char *text;
    int nparams;
    const Oid *types;
    const char *const *values;
    const int *lengths;
    const int *formats;
};

/* The engine's table of calls (sql.h), in sql_pg.c. */
extern const struct sql_engine pg_engine;

/* ---- sql_pg_conn.c ---- */

char *pg_redact_url(const char *url);
void pg_copy_message(char *out, size_t outlen, const char *msg);
void pg_session_setup_sql(struct pg_store *s, int lock_timeout_ms);
void pg_stmt_clear_result(struct pg_stmt *s);
void pg_stmt_free(struct pg_stmt *s);
void pg_conn_close(struct pg_conn *c);
void pg_set_error(struct pg_conn *c, enum store_status status, const char *msg);
bool pg_conn_usable(struct pg_conn *c);
struct pg_conn *pg_conn(struct store *st);
void pg_fail(struct pg_conn *c, const PGresult *res);
int pg_run(struct pg_conn *c, const char *sql);
PGresult *pg_pipeline(struct pg_conn *c, const char *const *pre, int npre, const struct pg_query *q,
                      PGresult **commit);
enum store_status pg_commit_status(struct pg_conn *c, PGresult *res);
PGresult *pg_query_run(struct pg_conn *c, const struct pg_query *q);

/* ---- sql_pg_stmt.c ---- */

struct sql_stmt *pg_stmt(struct store *st, const char *sql);
void pg_bind_text(struct sql_stmt *ss, int idx, const char *v, bool copy);
void pg_bind_text_array(struct sql_stmt *ss, int idx, const char *literal);
void pg_bind_int64(struct sql_stmt *ss, int idx, int64_t v);
void pg_bind_null(struct sql_stmt *ss, int idx);
void pg_bind_blob(struct sql_stmt *ss, int idx, const void *v, size_t len);
int pg_step(struct sql_stmt *ss);
int pg_step_commit(struct sql_stmt *ss);
bool pg_col_null(struct sql_stmt *ss, int col);
int64_t pg_col_int64(struct sql_stmt *ss, int col);
const char *pg_col_text(struct sql_stmt *ss, int col);
size_t pg_col_blob(struct sql_stmt *ss, int col, void *out, size_t outlen);
void pg_done(struct sql_stmt *ss);
int64_t pg_changes(struct store *st);
int pg_exec(struct store *st, const char *sql);

#endif

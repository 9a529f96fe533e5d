/*
 * counts_sql.h: the statement behind /metrics' messages by state (counts.c), exported so that
 * unit.store.plans can check its SQLite query plan: it must count through indexes and never walk
 * the messages table, whose size is the installation's whole history.
 *
 * Private to the store (counts.c defines it; only that test reads it).
 */
#ifndef SBX_STORE_COUNTS_SQL_H
#define SBX_STORE_COUNTS_SQL_H

/* One row: how many messages are queued, delivering and failed, and how many there are in all. */
extern const char counts_messages_sql[];

#endif

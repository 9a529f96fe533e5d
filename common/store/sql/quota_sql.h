/*
 * quota_sql.h: the statements behind an App's quotas and their use (quotas.c), exported so that
 * unit.store.quotas can check their SQLite query plans: each count reads a partial index of live
 * rows (migration 0021) and never an App's whole history of Sessions, Workspaces or Sandboxes.
 *
 * Private to the store (quotas.c defines them; only that test reads them).
 */
#ifndef SBX_STORE_QUOTA_SQL_H
#define SBX_STORE_QUOTA_SQL_H

/* One row per App (?1: its id): id, its five quota columns, then its live Sandboxes, live
 * Sessions, Workspaces and their MiB. */
extern const char quota_usage_one_sql[];
/* The same for every App that is not deleted, in id order. */
extern const char quota_usage_all_sql[];
/* The MiB of every Workspace of the store that is not deleted: what the disk has promised. */
extern const char quota_disk_promised_sql[];

#endif

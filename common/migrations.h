/*
 * migrations.h: the SQL migrations, embedded in the binary at build time from
 * migrations/NNNN_name.sql (SQLite) and migrations/postgres/NNNN_name.sql (PostgreSQL; see
 * embed_migrations.cmake), so that sbx needs no files beside itself to create its database.
 * Both lists have the same versions and names (checked when cmake configures).
 */
#ifndef SBX_MIGRATIONS_H
#define SBX_MIGRATIONS_H

#include <stddef.h>

struct sbx_migration {
    int version;      /* NNNN of migrations/NNNN_name.sql */
    const char *name; /* name */
    const char *sql;
};

extern const struct sbx_migration sbx_migrations[];
extern const size_t sbx_migrations_count;
extern const struct sbx_migration sbx_pg_migrations[];
extern const size_t sbx_pg_migrations_count;

#endif

# Generates a C file holding every migration as a string, in version order: migrations/NNNN_name.sql
# (SQLite) as sbx_migrations[], and migrations/postgres/NNNN_name.sql as sbx_pg_migrations[].
# Run as: cmake -DSRC=<migrations dir> -DPG_SRC=<postgres migrations dir> -DOUT=<file.c>
#               -P embed_migrations.cmake

# Appends to `body` one string per migration in dir, and to `table` the array named var.
function(embed_dir dir var prefix)
  file(GLOB files "${dir}/[0-9][0-9][0-9][0-9]_*.sql")
  list(SORT files)
  set(count 0)
  string(APPEND table "const struct sbx_migration ${var}[] = {\n")
  foreach(f IN LISTS files)
    get_filename_component(base "${f}" NAME_WE)
    string(SUBSTRING "${base}" 0 4 version)
    string(SUBSTRING "${base}" 5 -1 name)
    math(EXPR version "1${version} - 10000")
    file(READ "${f}" hex HEX)
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" escaped "${hex}")
    string(APPEND body "static const char ${prefix}_${count}[] = \"${escaped}\";\n")
    string(APPEND table "    {${version}, \"${name}\", ${prefix}_${count}},\n")
    math(EXPR count "${count} + 1")
  endforeach()
  string(APPEND table "};\nconst size_t ${var}_count = ${count};\n\n")
  set(body "${body}" PARENT_SCOPE)
  set(table "${table}" PARENT_SCOPE)
endfunction()

set(body "/* Generated from migrations/ by embed_migrations.cmake: do not edit. */\n#include \"migrations.h\"\n\n")
set(table "")
embed_dir("${SRC}" sbx_migrations migration)
embed_dir("${PG_SRC}" sbx_pg_migrations pg_migration)
file(WRITE "${OUT}.tmp" "${body}\n${table}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)

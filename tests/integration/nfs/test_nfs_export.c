/*
 * test_nfs_export.c: it.nfs.export_reconcile: nfs_export against a real nfs-ganesha, no VMs:
 * adding exports starts the server (TCP 2049 served) and puts one EXPORT per Sandbox in its
 * config, admitting that Sandbox's address alone; reconciliation withdraws the exports of
 * Sandboxes that no longer run and keeps the others (the server rereads its config: the
 * withdrawn one is gone from it); remove is idempotent; bad input is refused. Exports are
 * tagged with the installation: reconciliation judges this installation's and untagged (older)
 * ones, never another installation's.
 *
 * Usage: test_nfs_export     (needs root and nfs-ganesha; exit 77 = skipped)
 */
#include "config.h"
#include "log.h"
#include "host/host_tag.h"
#include "host/nfs_export.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, what, #cond);             \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static bool only_a_live(const char *sandbox_id, void *arg)
{
    (void)arg;
    return strcmp(sandbox_id, "sbx_live") == 0;
}

static bool file_contains(const char *path, const char *needle)
{
    static char buf[65536];
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

int main(void)
{
    if (geteuid() != 0 || system("command -v ganesha.nfsd >/dev/null") != 0) {
        fprintf(stderr, "skipped: needs root and nfs-ganesha\n");
        return 77;
    }
    log_init("test", "info");
    char tmpl[] = "/tmp/sbx-it-nfsx-XXXXXX";
    char *data = mkdtemp(tmpl);
    if (data == NULL)
        return 2;
    struct sbx_config cfg;
    char err[1024], conf[PATH_MAX], pseudo[128];
    char *cargv[] = {"test", NULL};
    setenv("SBX_DATA_DIR", data, 1);
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0)
        return 2;
    char ws[PATH_MAX];
    snprintf(ws, sizeof ws, "%s/ws", data);
    mkdir(ws, 0770);
    snprintf(conf, sizeof conf, "%s/run/ganesha/ganesha.conf", data);

    CHECK(nfs_export_add(&cfg, "sbx_live", "10.213.0.2", ws, 1, pseudo, sizeof pseudo, err,
                         sizeof err) == 0,
          err);
    CHECK(strcmp(pseudo, "/sbx/sbx_live") == 0, pseudo);
    CHECK(nfs_export_add(&cfg, "sbx_gone", "10.213.0.6", ws, 2, pseudo, sizeof pseudo, err,
                         sizeof err) == 0,
          err);
    CHECK(file_contains(conf, "Clients = 10.213.0.2;") && file_contains(conf, "/sbx/sbx_gone"),
          "both exports in ganesha.conf");
    CHECK(file_contains(conf, "Access_Type = None;"), "exports closed to everyone else");
    CHECK(system("ss -ltnH 'sport = :2049' | grep -q .") == 0, "TCP 2049 not served");

    size_t removed = 0;
    CHECK(nfs_export_reconcile(&cfg, only_a_live, NULL, &removed, err, sizeof err) == 0, err);
    CHECK(removed == 1, "reconcile removed other than the one dead export");
    CHECK(nfs_export_exists(&cfg, "sbx_live") && !nfs_export_exists(&cfg, "sbx_gone"),
          "the live export must stay, the dead one go");
    CHECK(!file_contains(conf, "/sbx/sbx_gone") && file_contains(conf, "/sbx/sbx_live"),
          "ganesha.conf after reconcile");

    CHECK(nfs_export_remove(&cfg, "sbx_live", err, sizeof err) == 0, err);
    CHECK(nfs_export_remove(&cfg, "sbx_live", err, sizeof err) == 0, "remove is idempotent");
    CHECK(!file_contains(conf, "/sbx/sbx_live"), "removed export still configured");

    /* Tagged with installation inst0001: its files are named so, and the block says so. An
     * export file tagged with another installation, and an untagged leftover of an older sbx. */
    char path[PATH_MAX + 64];
    host_tag_set("inst0001");
    CHECK(nfs_export_add(&cfg, "sbx_live", "10.213.0.2", ws, 1, pseudo, sizeof pseudo, err,
                         sizeof err) == 0,
          err);
    CHECK(nfs_export_add(&cfg, "sbx_gone", "10.213.0.6", ws, 2, pseudo, sizeof pseudo, err,
                         sizeof err) == 0,
          err);
    snprintf(path, sizeof path, "%s/run/ganesha/exports/inst0001-sbx_live.export", data);
    CHECK(access(path, F_OK) == 0, "the export file is not named after the installation");
    CHECK(file_contains(conf, "# sandbox sbx_live of installation inst0001"), "block not tagged");
    snprintf(path, sizeof path, "%s/run/ganesha/exports/inst0002-sbx_gone.export", data);
    FILE *other = fopen(path, "we");
    CHECK(other && fputs("# another installation's\n", other) >= 0 && fclose(other) == 0, path);
    snprintf(path, sizeof path, "%s/run/ganesha/exports/sbx_old.export", data);
    FILE *old = fopen(path, "we");
    CHECK(old && fputs("# an older sbx's\n", old) >= 0 && fclose(old) == 0, path);
    CHECK(nfs_export_reconcile(&cfg, only_a_live, NULL, &removed, err, sizeof err) == 0, err);
    CHECK(removed == 2, "reconcile: this installation's dead export and the untagged one");
    CHECK(nfs_export_exists(&cfg, "sbx_live") && !nfs_export_exists(&cfg, "sbx_gone") &&
              !nfs_export_exists(&cfg, "sbx_old"),
          "the live export stays, the dead and the untagged ones go");
    snprintf(path, sizeof path, "%s/run/ganesha/exports/inst0002-sbx_gone.export", data);
    CHECK(access(path, F_OK) == 0, "another installation's export was removed");
    CHECK(nfs_export_remove(&cfg, "sbx_live", err, sizeof err) == 0, err);
    CHECK(!nfs_export_exists(&cfg, "sbx_live"), "a tagged export was not removed");
    host_tag_set("");

    CHECK(nfs_export_add(&cfg, "../etc", "10.213.0.2", ws, 3, pseudo, sizeof pseudo, err,
                         sizeof err) != 0,
          "a path-like sandbox id was accepted");
    CHECK(nfs_export_add(&cfg, "sbx_x", "not-an-ip", ws, 3, pseudo, sizeof pseudo, err,
                         sizeof err) != 0,
          "a non-address client was accepted");
    CHECK(nfs_export_add(&cfg, "sbx_x", "10.213.0.2", "/nonexistent\"}", 3, pseudo, sizeof pseudo,
                         err, sizeof err) != 0,
          "a directory that breaks the config was accepted");

    CHECK(nfs_export_stop(&cfg, err, sizeof err) == 0, err);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", data);
    fprintf(stderr, failures ? "it.nfs.export_reconcile: failures\n" : "ok\n");
    return failures ? 1 : 0;
}

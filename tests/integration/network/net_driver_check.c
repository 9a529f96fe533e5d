/*
 * net_driver_check.c: boots one Sandbox with the real process driver (worker/drivers/process.c,
 * the path the workers take) so that it_driver.sh can send packets from inside it, then ends it
 * the way the script asks: "terminate" (driver terminate) or "reap" (the worker died: reap from
 * the store's record, as reconciliation does).
 *
 *   net_driver_check ROOTFS DATA_DIR POOL
 * prints "<pid> <net_address> <sandbox id>", then reads one command line from stdin, does it,
 * prints "done" (or "error: ...") and exits.
 */
#include "config.h"
#include "drivers/driver.h"
#include "id.h"
#include "log.h"
#include "host/links.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: net_driver_check ROOTFS DATA_DIR POOL\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_init("test", "warn");
    struct sbx_config cfg;
    char err[512];
    char *cargv[] = {"net_driver_check", NULL};
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    snprintf(cfg.rootfs, sizeof cfg.rootfs, "%s", argv[1]);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", argv[2]);
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%s/jail", argv[2]);
    snprintf(cfg.net_pool, sizeof cfg.net_pool, "%s", argv[3]);
    cfg.sandbox_uid = 4242;
    cfg.sandbox_gid = 4343;
    if (driver_process.init(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    struct sandbox_runtime rt = {0};
    id_new("sbx", rt.sandbox_id, sizeof rt.sandbox_id);
    snprintf(rt.shape.driver, sizeof rt.shape.driver, "process");
    rt.shape.mem_size_mib = 128;
    rt.shape.vcpu_count = 1;
    if (driver_process.boot(&cfg, &rt, err, sizeof err) != 0) {
        fprintf(stderr, "boot: %s\n", err);
        return 1;
    }
    printf("%d %s %s\n", (int)rt.pid, rt.net_address[0] ? rt.net_address : "-", rt.sandbox_id);

    char cmd[64] = "";
    if (!fgets(cmd, sizeof cmd, stdin))
        snprintf(cmd, sizeof cmd, "terminate");
    cmd[strcspn(cmd, "\n")] = '\0';
    int rc;
    if (strcmp(cmd, "reap") == 0) {
        /* What the store recorded about the Sandbox; the runtime is "lost". */
        struct store_sandbox rec = {0};
        snprintf(rec.id, sizeof rec.id, "%s", rt.sandbox_id);
        snprintf(rec.state, sizeof rec.state, "running");
        rec.pid = rt.pid;
        snprintf(rec.jail_dir, sizeof rec.jail_dir, "%s", rt.jail_dir);
        snprintf(rec.cgroup_path, sizeof rec.cgroup_path, "%s", rt.cgroup_path);
        snprintf(rec.net_address, sizeof rec.net_address, "%s", rt.net_address);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        rec.created_at = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000; /* booted just now */
        close(rt.channel_fd);
        rc = driver_process.reap(&cfg, &rec, err, sizeof err);
    } else {
        struct store_usage usage;
        rc = driver_process.terminate(&cfg, &rt, &usage, err, sizeof err);
    }
    if (rc != 0)
        printf("error: %s\n", err);
    else
        printf("done\n");
    net_shutdown();
    return rc == 0 ? 0 : 1;
}

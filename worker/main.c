/*
 * main.c: the sbx-worker daemon: reads the configuration, runs one worker until SIGTERM.
 */
#include "config.h"
#include "drivers/driver.h"
#include "log.h"
#include "worker.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct sbx_config cfg;
    struct worker w;
    char err[1024];

    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: sbx-worker [--config FILE] [--setting value ...]\n\n"
                   "Consumes the message queue: activates Sandboxes from the warm pool, delivers\n"
                   "messages to the App's agent, expires idle Sandboxes. Settings:\n\n");
            config_print_reference(stdout);
            return 0;
        }
    if (config_load(&cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "sbx-worker: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (argv[i]) {
            fprintf(stderr, "sbx-worker: unknown argument \"%s\" (try --help)\n", argv[i]);
            return 2;
        }
    log_init("worker", cfg.log_level);
    if (worker_init(&w, &cfg, driver_find, err, sizeof err) != 0) {
        log_error("worker: %s", err);
        worker_fini(&w);
        return 1;
    }
    int rc = worker_run(&w);
    worker_fini(&w);
    return rc;
}

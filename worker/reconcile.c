/*
 * reconcile.c: adopting what dead workers left behind (reconcile.h). Two live workers may both see
 * the same dead one; worker_adopt() lets exactly one of them take it.
 */
#include "reconcile.h"
#include "lifecycle.h"
#include "log.h"
#include "timefmt.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether pid on this host is a live sbx-worker process (not a zombie, not a reused pid). */
static bool pid_is_live_worker(int64_t pid)
{
    char path[64], buf[512];
    FILE *f;
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
        return false;
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    if (!(f = fopen(path, "r")))
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the comm may hold spaces or parentheses, so look after the last ')'. */
    char *close = strrchr(buf, ')'), *open = strchr(buf, '(');
    if (!close || !open || close[1] != ' ' || close[2] == 'Z' || close[2] == 'X')
        return false;
    *close = '\0';
    /* sbx-worker, or a test build of it (sbx-worker-fork). */
    return strncmp(open + 1, "sbx-worker", 10) == 0;
}

static void reap_adopted(struct worker *w)
{
    struct store_sandbox *list = NULL;
    size_t n = 0;
    if (w->st->sandbox_list_live(w->st, w->id, &list, &n) != STORE_OK)
        return;
    for (size_t i = 0; i < n; i++)
        if (!lifecycle_find(w, list[i].id))
            lifecycle_reap(w, &list[i]);
    free(list);
}

void reconcile_run(struct worker *w)
{
    struct store_worker *workers = NULL;
    size_t n = 0, requeued = 0;
    bool adopted = false;
    int64_t now = now_ms();

    if (w->st->worker_list_active(w->st, &workers, &n) == STORE_OK) {
        for (size_t i = 0; i < n; i++) {
            const struct store_worker *o = &workers[i];
            if (strcmp(o->id, w->id) == 0)
                continue;
            /* On this host the process table is the truth: a live worker whose loop was held up
             * (a long SQLite busy wait) is never taken for dead. Elsewhere only the heartbeat
             * tells. */
            bool same_host = strcmp(o->host, w->hostname) == 0;
            bool stale = now - o->heartbeat_at > w->cfg.worker_stale_ms;
            bool gone = same_host ? !pid_is_live_worker(o->pid) : stale;
            if (!gone)
                continue;
            enum store_status rc = w->st->worker_adopt(w->st, &w->ctx, o->id, w->id);
            if (rc == STORE_OK) {
                log_info("worker: adopted dead worker %s (pid %lld, %s)", o->id, (long long)o->pid,
                         gone ? "process gone" : "heartbeat stale");
                adopted = true;
            } else if (rc != STORE_NOT_FOUND) {
                log_warn("worker: cannot adopt %s: %s", o->id, store_status_name(rc));
            }
        }
        free(workers);
    }
    if (adopted)
        reap_adopted(w);
    if (w->st->queue_requeue_expired(w->st, &w->ctx, &requeued) == STORE_OK && requeued > 0)
        log_info("worker: requeued %zu messages whose lease expired", requeued);
    if (adopted || requeued > 0)
        consumer_kick(w);
}

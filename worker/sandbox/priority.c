/*
 * priority.c: putting a Sandbox booted by a background job thread back to normal CPU priority
 * (priority.h). Linux keeps the nice level per thread and a child inherits its parent thread's,
 * so the walk visits every thread (/proc/PID/task) and, through each thread's children list,
 * every descendant. No hidden state.
 */
#include "sandbox/priority.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

bool priority_background_boots(void)
{
    return geteuid() == 0;
}

/* A Sandbox's process tree is small (an init, an agent, a VMM and its threads): a bounded walk. */
#define TREE_MAX_DEPTH 8

static int restore(pid_t pid, int nice, int depth)
{
    char path[64];
    int rc = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : -1; /* gone meanwhile: nothing to do */
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        if (setpriority(PRIO_PROCESS, (id_t)tid, nice) != 0 && errno != ESRCH)
            rc = -1;
        if (depth >= TREE_MAX_DEPTH)
            continue;
        char cpath[96];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%ld/children", (int)pid, tid);
        FILE *f = fopen(cpath, "re");
        if (!f)
            continue;
        int child;
        while (fscanf(f, "%d", &child) == 1)
            if (restore((pid_t)child, nice, depth + 1) != 0)
                rc = -1;
        fclose(f);
    }
    closedir(d);
    return rc;
}

int priority_restore_tree(pid_t pid, int nice)
{
    return pid > 0 ? restore(pid, nice, 0) : 0;
}

/*
 * process_init.c: sbx-process-init, the first program of a process driver Sandbox. The worker
 * clones into the Sandbox's new namespaces without copying itself and execs this at once
 * (drivers/process_child.h); it reads the plan the worker made, waits for the go-ahead, builds the
 * Sandbox's root and execs the agent. Not a command to run by hand:
 *
 *   sbx-process-init --plan-fd N
 */
#include "drivers/process_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Nowhere to report to before the plan names error_fd: a message on stderr (the worker's, as
 * the clone inherited it) and exit 1; the worker sees its channel close. */
static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", PROCESS_INIT_NAME, what);
    _exit(1);
}

int main(int argc, char **argv)
{
    int plan_fd = -1;
    if (argc == 3 && strcmp(argv[1], "--plan-fd") == 0)
        plan_fd = atoi(argv[2]);
    else
        die("usage: --plan-fd N (started by sbx-worker only)");
    struct stat st;
    if (plan_fd < 0 || fstat(plan_fd, &st) != 0)
        die("no plan descriptor");
    static struct process_child_plan plan; /* about 140 KiB: not on the stack */
    if (st.st_size != (off_t)sizeof plan)
        die("the plan's size is not this build's: sbx-worker and sbx-process-init differ");
    size_t got = 0;
    while (got < sizeof plan) {
        ssize_t n = pread(plan_fd, (char *)&plan + got, sizeof plan - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die("cannot read the plan");
        got += (size_t)n;
    }
    if (plan.magic != PROCESS_CHILD_PLAN_MAGIC || plan.size != sizeof plan)
        die("not a plan of this build");
    /* The worker blocked every signal around the clone; the agent gets the mask it had. */
    sigprocmask(SIG_SETMASK, &plan.sigmask, NULL);
    close(plan_fd);
    process_child_run(&plan);
}

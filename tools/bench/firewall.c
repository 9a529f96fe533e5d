/*
 * tools/bench/firewall.c: how the cost of one Sandbox's firewall change grows with the number of
 * live Sandboxes (it should not: a change is one batch of set elements, never a ruleset rebuild).
 *
 * In a network namespace of its own (so the host's ruleset is never touched; needs root), it
 * creates sbx's table with fw_init(), adds Sandboxes' firewall state up to 1,000 live ones, and at
 * 10, 100 and 1,000 live Sandboxes times SAMPLES changes of each kind (add one more Sandbox, set
 * its NFS element, remove it); then it removes all of them. It prints the median and 90th
 * percentile per change and the ratio of the median to the one at 10 live Sandboxes.
 *
 *   sbx-bench-firewall [--samples N] [--max N]     (defaults 200 and 1000)
 */
#include "host/firewall.h"

#include <arpa/inet.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_ADD, OP_NFS, OP_REMOVE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"add", "nfs on", "remove"};

struct sandbox {
    char id[32];
    char ifname[IFNAMSIZ];
    struct fw_sandbox fw;
};

static void sandbox_make(struct sandbox *s, unsigned k)
{
    snprintf(s->id, sizeof(s->id), "sbx_bench%06u", k);
    snprintf(s->ifname, sizeof(s->ifname), FW_IFNAME_PREFIX "%u", k);
    s->fw.sandbox_id = s->id;
    s->fw.ifname = s->ifname;
    s->fw.addr.s_addr = htonl((10u << 24) | (213u << 16) | (k * 4 + 2)); /* slot k of 10.213/16 */
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "sbx-bench-firewall: %s: %s\n", what, err);
    exit(1);
}

/* Times `samples` add / nfs / remove cycles of one extra Sandbox at the current size. */
static void measure(struct fw *fw, unsigned extra, int samples, double median[OP_COUNT],
                    double p90[OP_COUNT])
{
    double *t[OP_COUNT];
    char err[512];
    for (int op = 0; op < OP_COUNT; op++)
        t[op] = calloc((size_t)samples, sizeof(double));
    struct sandbox s;
    sandbox_make(&s, extra);
    for (int i = 0; i < samples; i++) {
        double a = now_us();
        if (fw_sandbox_add(fw, &s.fw, err, sizeof(err)) < 0)
            die("add", err);
        double b = now_us();
        if (fw_sandbox_set_nfs(fw, &s.fw, true, err, sizeof(err)) < 0)
            die("nfs", err);
        double c = now_us();
        if (fw_sandbox_remove(fw, &s.fw, err, sizeof(err)) < 0)
            die("remove", err);
        double d = now_us();
        t[OP_ADD][i] = b - a;
        t[OP_NFS][i] = c - b;
        t[OP_REMOVE][i] = d - c;
    }
    for (int op = 0; op < OP_COUNT; op++) {
        qsort(t[op], (size_t)samples, sizeof(double), cmp_double);
        median[op] = t[op][samples / 2];
        p90[op] = t[op][samples * 9 / 10];
        free(t[op]);
    }
}

int main(int argc, char **argv)
{
    int samples = 200;
    unsigned max = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0)
            samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max") == 0)
            max = (unsigned)atoi(argv[i + 1]);
    }
    if (samples < 10 || max < 10)
        die("usage", "sbx-bench-firewall [--samples N>=10] [--max N>=10]");
    if (unshare(CLONE_NEWNET) < 0)
        die("unshare(CLONE_NEWNET)", "a network namespace of its own needs root");
    char err[512];
    struct fw *fw = fw_init("10.213.0.0/16", err, sizeof(err));
    if (!fw)
        die("fw_init", err);

    const unsigned sizes[] = {10, 100, 1000};
    double base[OP_COUNT] = {0};
    struct sandbox *live = calloc(max, sizeof(*live));
    unsigned n = 0;
    printf("firewall change time (microseconds) by live Sandboxes, %d samples each\n", samples);
    printf("%6s  %-7s %9s %9s %8s\n", "live", "change", "median", "p90", "ratio");
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]) && sizes[si] <= max; si++) {
        for (; n < sizes[si]; n++) {
            sandbox_make(&live[n], n);
            if (fw_sandbox_add(fw, &live[n].fw, err, sizeof(err)) < 0)
                die("add", err);
        }
        struct fw_element *v;
        size_t have;
        if (fw_elements(fw, &v, &have, err, sizeof(err)) < 0)
            die("elements", err);
        free(v);
        if (have != n)
            die("elements", "the table does not hold the Sandboxes added");
        double median[OP_COUNT], p90[OP_COUNT];
        measure(fw, 60000, samples, median, p90);
        for (int op = 0; op < OP_COUNT; op++) {
            if (si == 0)
                base[op] = median[op];
            printf("%6u  %-7s %9.1f %9.1f %8.2f\n", n, op_names[op], median[op], p90[op],
                   median[op] / base[op]);
        }
    }
    double t = now_us();
    for (unsigned i = 0; i < n; i++)
        if (fw_sandbox_remove(fw, &live[i].fw, err, sizeof(err)) < 0)
            die("remove", err);
    t = now_us() - t;
    printf("removed %u Sandboxes in %.1f ms (%.1f us each)\n", n, t / 1e3, t / n);
    free(live);
    fw_close(fw);
    return 0;
}

/*
 * tools/bench/image_boot.c: cold and warm activation of an App's image beside the
 * built-in image, through the process and qemu drivers, measured at the driver as the worker
 * drives it:
 *   boot  boot a Sandbox until its agent is ready (part of cold)
 *   cold  boot a Sandbox, start the App's command, send one message, read its reply
 *   warm  the same on a Sandbox booted beforehand (what a warm-pool claim leaves to do)
 * The built-in image runs sbx-echo-agent; the image is the Debian 12 + python3 test image of
 * tests/integration/images/build-boot-images.sh with its Python agent. Prints p50/p90 per row and
 * the ratio of the image to the built-in one; never fails on a number. Needs root.
 *
 *   sbx-bench-image-boot IMAGES_ENV GUEST_DIR [--runs N] [--qemu-runs M] [--process-only]
 *   (defaults: 10 process runs, 3 qemu runs; qemu under TCG)
 */
#include "config.h"
#include "drivers/driver.h"
#include "id.h"
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct sbx_config cfg;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int send_line(int fd, const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t n = write(fd, line + off, len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 100);
        } else {
            return -1;
        }
    }
    return write(fd, "\n", 1) == 1 ? 0 : -1;
}

/* Waits for a line that contains needle (skipping others); 0, or -1 on timeout or EOF. */
static int wait_for(int fd, const char *needle, int timeout_ms)
{
    static char buf[1 << 20];
    size_t len = 0;
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        char *nl;
        while ((nl = memchr(buf, '\n', len)) != NULL) {
            *nl = '\0';
            bool hit = strstr(buf, needle) != NULL;
            size_t used = (size_t)(nl - buf) + 1;
            memmove(buf, buf + used, len - used);
            len -= used;
            if (hit)
                return 0;
        }
        int left = (int)(deadline - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || len == sizeof buf || poll(&p, 1, left) != 1)
            return -1;
        ssize_t n = read(fd, buf + len, sizeof buf - len);
        if (n <= 0 && !(n < 0 && errno == EAGAIN))
            return -1;
        if (n > 0)
            len += (size_t)n;
    }
}

struct target {
    const struct driver *drv;
    const char *image; /* "default" or a digest */
    const char *start; /* the start line */
};

static int boot(const struct target *t, struct sandbox_runtime *rt)
{
    char err[1024];
    memset(rt, 0, sizeof *rt);
    rt->channel_fd = -1;
    id_new("sbx", rt->sandbox_id, sizeof rt->sandbox_id);
    snprintf(rt->shape.driver, sizeof rt->shape.driver, "%s", t->drv->name);
    snprintf(rt->shape.image, sizeof rt->shape.image, "%s", t->image);
    rt->shape.vcpu_count = 1;
    rt->shape.mem_size_mib = 256;
    if (t->drv->boot(&cfg, rt, err, sizeof err) != 0) {
        fprintf(stderr, "boot %s on %s: %s\n", t->image, t->drv->name, err);
        return -1;
    }
    return 0;
}

/* Start the command and have one message answered. */
static int activate(const struct target *t, struct sandbox_runtime *rt)
{
    int timeout = strcmp(t->drv->name, "qemu") == 0 ? 120000 : 20000;
    if (send_line(rt->channel_fd, t->start) != 0 ||
        wait_for(rt->channel_fd, "\"type\":\"started\"", timeout) != 0 ||
        send_line(rt->channel_fd, "{\"id\":\"msg_bench\",\"seq\":1,\"body\":{\"bench\":1}}") != 0 ||
        wait_for(rt->channel_fd, "\"msg_bench\"", timeout) != 0) {
        fprintf(stderr, "%s on %s: no answer\n", t->image, t->drv->name);
        return -1;
    }
    return 0;
}

static void end(const struct target *t, struct sandbox_runtime *rt)
{
    char err[512];
    struct store_usage usage;
    if (t->drv->terminate(&cfg, rt, &usage, err, sizeof err) != 0)
        fprintf(stderr, "terminate: %s\n", err);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* Measures runs cold and runs warm activations; *cold_p50 and *warm_p50 get the medians. */
static int measure(const struct target *t, int runs, const char *label, double *cold_p50,
                   double *warm_p50)
{
    double cold[64], warm[64], booted[64];
    struct sandbox_runtime rt;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        if (boot(t, &rt) != 0)
            return -1;
        booted[i] = now_ms() - t0;
        int rc = activate(t, &rt);
        cold[i] = now_ms() - t0;
        end(t, &rt);
        if (rc != 0)
            return -1;
        if (boot(t, &rt) != 0)
            return -1;
        t0 = now_ms();
        rc = activate(t, &rt);
        warm[i] = now_ms() - t0;
        end(t, &rt);
        if (rc != 0)
            return -1;
    }
    *cold_p50 = percentile(cold, runs, 0.5);
    *warm_p50 = percentile(warm, runs, 0.5);
    printf("%-8s %-14s %10.1f %10.1f %10.1f %10.1f %10.1f %8.1f  n=%d\n", t->drv->name, label,
           percentile(booted, runs, 0.5), *cold_p50, percentile(cold, runs, 0.9), *warm_p50,
           percentile(warm, runs, 0.9), *cold_p50 / *warm_p50, runs);
    fflush(stdout);
    return 0;
}

static int load_digest(const char *file, char *data_dir, size_t dlen, char *digest, size_t len)
{
    FILE *f = fopen(file, "re");
    if (!f)
        return -1;
    char line[PATH_MAX + 32];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "DATA_DIR=", 9) == 0)
            snprintf(data_dir, dlen, "%s", line + 9);
        else if (strncmp(line, "DEBIAN_DIGEST=", 14) == 0)
            snprintf(digest, len, "%s", line + 14);
    }
    fclose(f);
    return data_dir[0] && digest[0] ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s IMAGES_ENV GUEST_DIR [--runs N] [--qemu-runs M] "
                "[--process-only]\n",
                argv[0]);
        return 2;
    }
    int runs = 10, qemu_runs = 3;
    bool process_only = false;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--qemu-runs") == 0 && i + 1 < argc)
            qemu_runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--process-only") == 0)
            process_only = true;
    }
    runs = runs < 1 ? 1 : (runs > 64 ? 64 : runs);
    qemu_runs = qemu_runs < 1 ? 1 : (qemu_runs > 64 ? 64 : qemu_runs);
    if (geteuid() != 0) {
        fprintf(stderr, "image-boot bench: needs root\n");
        return 0;
    }
    log_init("bench", "warn");
    char data_dir[PATH_MAX] = "", digest[80] = "", err[1024];
    if (load_digest(argv[1], data_dir, sizeof data_dir, digest, sizeof digest) != 0) {
        fprintf(stderr, "%s does not name the test images\n", argv[1]);
        return 2;
    }
    char tmpl[] = "/tmp/sbx-bench-images-XXXXXX";
    char *scratch = mkdtemp(tmpl);
    if (!scratch)
        return 2;
    chmod(scratch, 0755);
    char *cargv[] = {argv[0], NULL};
    setenv("SBX_DATA_DIR", scratch, 1);
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return 2;
    }
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%.400s/jail", scratch);
    snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%s", argv[2]);
    snprintf(cfg.qemu_accel, sizeof cfg.qemu_accel, "tcg");

    static const char echo_start[] =
        "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],\"workspace\":null}";
    static const char python_start[] =
        "{\"type\":\"start\",\"argv\":[\"python3\",\"/opt/agent/agent.py\"],\"workspace\":null,"
        "\"env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\"],\"cwd\":\"/opt/agent\"}";
    printf("%-8s %-14s %10s %10s %10s %10s %10s %8s\n", "driver", "image", "boot p50", "cold p50",
           "cold p90", "warm p50", "warm p90", "c/w");
    const struct driver *drivers[] = {&driver_process, &driver_qemu};
    char vmlinuz[PATH_MAX + 16];
    snprintf(vmlinuz, sizeof vmlinuz, "%s/vmlinuz", argv[2]);
    for (size_t d = 0; d < 2; d++) {
        const struct driver *drv = drivers[d];
        bool qemu = drv == &driver_qemu;
        if (qemu && (process_only || access(vmlinuz, R_OK) != 0)) {
            printf("qemu     skipped (%s)\n", process_only ? "--process-only" : "no guest image");
            continue;
        }
        if (drv->init(&cfg, err, sizeof err) != 0) {
            printf("%-8s skipped: %s\n", drv->name, err);
            continue;
        }
        struct target builtin = {drv, "default", echo_start}, image = {drv, digest, python_start};
        double bc, bw, ic, iw;
        int n = qemu ? qemu_runs : runs;
        if (measure(&builtin, n, "default", &bc, &bw) == 0 &&
            measure(&image, n, "debian+python", &ic, &iw) == 0)
            printf("%-8s image/default: cold %.2fx, warm %.2fx\n", drv->name, ic / bc, iw / bw);
    }
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", scratch);
    return 0;
}

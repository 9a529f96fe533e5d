/*
 * log_cap.c: the VMM log rotator (see log_cap.h).
 */
#include "host/log_cap.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct watched {
    struct watched *next;
    int64_t max_bytes;
    char path[];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct watched *files;
static bool thread_started;

/* Copies path to <path>.1 and truncates path. */
static void rotate(const char *path)
{
    char older[PATH_MAX];
    snprintf(older, sizeof older, "%s.1", path);
    int in = open(path, O_RDONLY | O_CLOEXEC);
    int out = open(older, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (in >= 0 && out >= 0) {
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n)
                break;
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    /* What the writer appended between the copy and here is lost: a log, not a record. */
    if (truncate(path, 0) != 0 && errno != ENOENT)
        log_warn("log cap: truncate %s: %s", path, strerror(errno));
}

static void *rotator(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, LOG_CAP_INTERVAL_MS * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&lock);
        for (struct watched *w = files; w; w = w->next) {
            struct stat st;
            if (stat(w->path, &st) == 0 && st.st_size >= w->max_bytes)
                rotate(w->path);
        }
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int log_cap_watch(const char *path, int64_t max_bytes)
{
    size_t len = strlen(path) + 1;
    struct watched *w = malloc(sizeof *w + len);
    if (!w)
        return -1;
    memcpy(w->path, path, len);
    w->max_bytes = max_bytes;
    pthread_mutex_lock(&lock);
    if (!thread_started) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        thread_started = pthread_create(&t, &attr, rotator, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!thread_started) {
            pthread_mutex_unlock(&lock);
            free(w);
            return -1;
        }
    }
    w->next = files;
    files = w;
    pthread_mutex_unlock(&lock);
    return 0;
}

void log_cap_unwatch(const char *path)
{
    pthread_mutex_lock(&lock);
    for (struct watched **p = &files; *p; p = &(*p)->next)
        if (strcmp((*p)->path, path) == 0) {
            struct watched *gone = *p;
            *p = gone->next;
            free(gone);
            break;
        }
    pthread_mutex_unlock(&lock);
}

int log_cap_child_limit(int64_t max_bytes)
{
    struct rlimit rl = {(rlim_t)max_bytes, (rlim_t)max_bytes};
    if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR)
        return -1;
    return setrlimit(RLIMIT_FSIZE, &rl);
}

/*
 * notify.c: Unix datagram wake-ups (see notify.h). The sender caches the directory listing for a
 * second, so a burst of enqueues costs one sendto() per receiver and not a readdir() each.
 */
#include "notify.h"
#include "timefmt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define NOTIFY_MAX_PEERS 256

struct notify_peer {
    pthread_mutex_t lock;
    char run_dir[400];
    char role[32];
    int fd;
    int64_t listed_at;
    size_t n;
    struct sockaddr_un addrs[NOTIFY_MAX_PEERS];
};

int notify_listen(const char *run_dir, const char *role, char *path_out, size_t pathlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (mkdir(run_dir, 0700) != 0 && errno != EEXIST)
        return -1;
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s-%d.sock", run_dir, role,
                         (int)getpid()) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlink(sa.sun_path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    snprintf(path_out, pathlen, "%s", sa.sun_path);
    return fd;
}

int notify_recv(int fd, char *buf, size_t buflen)
{
    ssize_t n = recv(fd, buf, buflen - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (int)n;
}

void notify_close(int fd, const char *path)
{
    if (fd >= 0)
        close(fd);
    if (path && *path)
        unlink(path);
}

struct notify_peer *notify_peer_new(const char *run_dir, const char *role)
{
    struct notify_peer *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    snprintf(p->run_dir, sizeof p->run_dir, "%s", run_dir);
    snprintf(p->role, sizeof p->role, "%s", role);
    p->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        free(p);
        return NULL;
    }
    return p;
}

void notify_peer_free(struct notify_peer *p)
{
    if (!p)
        return;
    close(p->fd);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void notify_refresh(struct notify_peer *p)
{
    DIR *d = opendir(p->run_dir);
    struct dirent *de;
    size_t rlen = strlen(p->role);

    p->n = 0;
    p->listed_at = mono_ms();
    if (!d)
        return;
    while ((de = readdir(d)) && p->n < NOTIFY_MAX_PEERS) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, p->role, rlen) != 0 || de->d_name[rlen] != '-' || len < 5 ||
            strcmp(de->d_name + len - 5, ".sock") != 0)
            continue;
        struct sockaddr_un *sa = &p->addrs[p->n];
        sa->sun_family = AF_UNIX;
        if ((size_t)snprintf(sa->sun_path, sizeof sa->sun_path, "%s/%s", p->run_dir, de->d_name) <
            sizeof sa->sun_path)
            p->n++;
    }
    closedir(d);
}

void notify_send(struct notify_peer *p, const char *msg)
{
    size_t len = strlen(msg);
    pthread_mutex_lock(&p->lock);
    if (mono_ms() - p->listed_at > 1000)
        notify_refresh(p);
    for (size_t i = 0; i < p->n; i++) {
        if (sendto(p->fd, msg, len, 0, (struct sockaddr *)&p->addrs[i], sizeof p->addrs[i]) < 0 &&
            errno == ECONNREFUSED) {
            /* Nobody is bound there any more: the process died without cleaning up. */
            unlink(p->addrs[i].sun_path);
            p->addrs[i] = p->addrs[--p->n];
            i--;
        }
    }
    pthread_mutex_unlock(&p->lock);
}

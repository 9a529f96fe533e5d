/*
 * userns_map.c: user namespaces with given id maps, for idmapped mounts (see userns_map.h).
 */
#include "host/userns_map.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_map(int pid, const char *file, const char *map, char *err, size_t errlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    size_t len = strlen(map);
    /* The kernel takes a map in one write() or not at all. */
    ssize_t n = fd >= 0 ? write(fd, map, len) : -1;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (n == (ssize_t)len)
        return 0;
    snprintf(err, errlen, "write %s: %s", path, n < 0 ? strerror(saved) : "short write");
    return -1;
}

int userns_map_open(const char *uid_map, const char *gid_map, char *err, size_t errlen)
{
    /* The child must not wait on a descriptor: a fork-like child inherits every descriptor of the
     * worker, close-on-exec or not, since it never execs. Two boots making their namespaces at
     * once on two threads each left a copy of its pipe's write end in the other's child, and both
     * children then waited forever for an end of file that could not come (and both boots with
     * them, in waitpid). So the child waits for nothing but its SIGKILL, and dies with this
     * thread should the worker die first. */
    pid_t parent = getpid();
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid == 0) {
        /* Nothing but system calls: the child of a threaded process. */
        syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (syscall(SYS_getppid) != parent)
            syscall(SYS_exit_group, 0);
        for (;;)
            syscall(SYS_ppoll, NULL, 0, NULL, NULL, 0);
    }
    if (pid < 0) {
        snprintf(err, errlen, "clone(CLONE_NEWUSER): %s", strerror(errno));
        return -1;
    }
    int fd = -1;
    if (write_map((int)pid, "uid_map", uid_map, err, errlen) == 0 &&
        write_map((int)pid, "gid_map", gid_map, err, errlen) == 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            snprintf(err, errlen, "open %s: %s", path, strerror(errno));
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return fd;
}

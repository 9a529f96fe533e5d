/*
 * image_user.c: the image's user, from its /etc/passwd and /etc/group (image_user.h).
 */
#include "image_user.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Splits a colon-separated database line in place into at most max fields; returns the count. */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line;
    while (n < max) {
        fields[n++] = p;
        char *colon = strchr(p, ':');
        if (!colon)
            break;
        *colon = '\0';
        p = colon + 1;
    }
    return n;
}

/* Parses a decimal id; -1 when s is not all digits or out of range. */
static long long parse_id(const char *s)
{
    if (!s[0] || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10)
        return -1;
    long long v = strtoll(s, NULL, 10);
    return v > 0xfffffffell ? -1 : v;
}

/* The largest user or group database read; a bigger one is treated as absent. */
#define DB_LIMIT (16 << 20)

/* Opens etc/<name> of the tree root_fd (or of this process's root for -1). In a tree, every link
 * resolves inside it (RESOLVE_IN_ROOT), as it would for a process whose root the tree is. The
 * tree is an image's, read by the worker on the host: the open never waits (O_NONBLOCK, for a
 * FIFO) and only a regular file is read (not a FIFO, socket or device a tree could hold). */
static FILE *open_db(int root_fd, const char *name)
{
    char path[64];
    int fd;
    if (root_fd < 0) {
        snprintf(path, sizeof path, "/etc/%s", name);
        fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    } else {
        snprintf(path, sizeof path, "etc/%s", name);
        struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof how);
    }
    if (fd < 0)
        return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > DB_LIMIT) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "re");
    if (!f)
        close(fd);
    return f;
}

/* Finds the passwd entry whose name is name (or, name NULL, whose uid is uid). */
static bool find_passwd(int root, const char *name, uid_t uid, struct image_user *out)
{
    FILE *f = open_db(root, "passwd");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char *fld[7];
        if (split_fields(line, fld, 7) < 7 || line[0] == '#')
            continue;
        long long u = parse_id(fld[2]), g = parse_id(fld[3]);
        if (u < 0 || g < 0)
            continue;
        if (name ? strcmp(fld[0], name) == 0 : (uid_t)u == uid) {
            out->uid = (uid_t)u;
            out->gid = (gid_t)g;
            snprintf(out->name, sizeof out->name, "%s", fld[0]);
            snprintf(out->home, sizeof out->home, "%s", fld[5][0] ? fld[5] : "/");
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* The gid of group name; -1 when the image has no such group. */
static long long find_group(int root, const char *name)
{
    FILE *f = open_db(root, "group");
    if (!f)
        return -1;
    char line[4096];
    long long gid = -1;
    while (gid < 0 && fgets(line, sizeof line, f)) {
        char *fld[4];
        if (split_fields(line, fld, 4) >= 3 && strcmp(fld[0], name) == 0)
            gid = parse_id(fld[2]);
    }
    fclose(f);
    return gid;
}

/* Adds the groups that list the user by name (supplementary groups), after its primary gid. */
static void add_member_groups(int root, struct image_user *u)
{
    u->groups[0] = u->gid;
    u->ngroups = 1;
    FILE *f = u->name[0] ? open_db(root, "group") : NULL;
    if (!f)
        return;
    char line[4096];
    while (u->ngroups < IMAGE_USER_MAX_GROUPS && fgets(line, sizeof line, f)) {
        char *fld[4];
        if (split_fields(line, fld, 4) < 4)
            continue;
        long long g = parse_id(fld[2]);
        if (g < 0 || (gid_t)g == u->gid)
            continue;
        char *save = NULL;
        for (char *m = strtok_r(fld[3], ",", &save); m; m = strtok_r(NULL, ",", &save)) {
            if (strcmp(m, u->name) == 0) {
                u->groups[u->ngroups++] = (gid_t)g;
                break;
            }
        }
    }
    fclose(f);
}

int image_user_resolve(const char *spec, int root, struct image_user *out, char *why, size_t whylen)
{
    char user[256], *group = NULL;
    memset(out, 0, sizeof *out);
    snprintf(out->home, sizeof out->home, "/");
    if (snprintf(user, sizeof user, "%s", spec) >= (int)sizeof user || !user[0]) {
        snprintf(why, whylen, "user '%.64s' is not a name, uid, name:group or uid:gid", spec);
        return -1;
    }
    char *colon = strchr(user, ':');
    if (colon) {
        *colon = '\0';
        group = colon + 1;
    }
    long long uid = parse_id(user);
    if (uid >= 0) {
        if (!find_passwd(root, NULL, (uid_t)uid, out)) {
            out->uid = (uid_t)uid;
            out->gid = 0; /* a uid the image does not list gets group 0, as Docker gives it */
        }
    } else if (!user[0] || !find_passwd(root, user, 0, out)) {
        snprintf(why, whylen, "user '%.64s' is not in the image's /etc/passwd", user);
        return -1;
    }
    if (group) {
        long long gid = parse_id(group);
        if (gid < 0 && (!group[0] || (gid = find_group(root, group)) < 0)) {
            snprintf(why, whylen, "group '%.64s' is not in the image's /etc/group", group);
            return -1;
        }
        out->gid = (gid_t)gid;
    }
    add_member_groups(root, out);
    return 0;
}

bool image_user_can_switch(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0)
        return false;
    unsigned need = (1u << CAP_SETUID) | (1u << CAP_SETGID);
    return (data[0].effective & need) == need;
}

/*
 * nfs_export.c: runs sbx's nfs-ganesha and manages one export per Sandbox (see nfs_export.h).
 * Hidden state: nfs_lock, which the threads of one process take in turn (processes take the flock
 * on <run>/lock).
 */
#include "fs.h"
#include "clock.h"
#include "host/host_tag.h"
#include "host/nfs_export.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GANESHA_BIN "ganesha.nfsd"
#define NFS_PORT 2049
#define GANESHA_START_TIMEOUT_MS 15000
#define GANESHA_RELOAD_TIMEOUT_MS 10000
#define RELOAD_DONE "Reread exports complete"
#define EXPORT_SUFFIX ".export"

/* Threads of one worker take turns here; worker processes through the flock on <run>/lock. */
static pthread_mutex_t nfs_lock = PTHREAD_MUTEX_INITIALIZER;

struct nfs_paths {
    char dir[PATH_MAX];     /* <data_dir>/run/ganesha */
    char exports[PATH_MAX]; /* .../exports */
    char conf[PATH_MAX];
    char pid[PATH_MAX];
    char log[PATH_MAX];
    char recovery[PATH_MAX];
    char lock[PATH_MAX];
};

static void paths_of(const struct sbx_config *cfg, struct nfs_paths *p)
{
    snprintf(p->dir, sizeof p->dir, "%.3000s/run/ganesha", cfg->data_dir);
    snprintf(p->exports, sizeof p->exports, "%.3000s/exports", p->dir);
    snprintf(p->conf, sizeof p->conf, "%.3000s/ganesha.conf", p->dir);
    snprintf(p->pid, sizeof p->pid, "%.3000s/ganesha.pid", p->dir);
    snprintf(p->log, sizeof p->log, "%.3000s/ganesha.log", p->dir);
    snprintf(p->recovery, sizeof p->recovery, "%.3000s/recovery", p->dir);
    snprintf(p->lock, sizeof p->lock, "%.3000s/lock", p->dir);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Takes both locks; returns the flock fd (or -1 with err). */
static int lock_take(const struct nfs_paths *p, char *err, size_t errlen)
{
    pthread_mutex_lock(&nfs_lock);
    if (fs_mkdir_p(p->exports, 0700) != 0 || fs_mkdir_p(p->recovery, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", p->dir, strerror(errno));
        pthread_mutex_unlock(&nfs_lock);
        return -1;
    }
    int fd = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        snprintf(err, errlen, "lock %s: %s", p->lock, strerror(errno));
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&nfs_lock);
        return -1;
    }
    return fd;
}

static void lock_release(int fd)
{
    close(fd); /* drops the flock */
    pthread_mutex_unlock(&nfs_lock);
}

/* ---------------------------------------------------------------- the server process */

static pid_t running_pid(const struct nfs_paths *p)
{
    FILE *f = fopen(p->pid, "re");
    long pid = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld", &pid) != 1)
        pid = 0;
    fclose(f);
    if (pid <= 0)
        return 0;
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    if (fgets(comm, sizeof comm, f) == NULL)
        comm[0] = '\0';
    fclose(f);
    /* A recycled pid of something else is not our server, nor is an exited one awaiting its
     * reaper (state Z in /proc/<pid>/stat, after the ")" of the command name). */
    if (strncmp(comm, "ganesha.nfsd", 12) != 0)
        return 0;
    char stat_line[512] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    if (fgets(stat_line, sizeof stat_line, f) == NULL)
        stat_line[0] = '\0';
    fclose(f);
    const char *close_paren = strrchr(stat_line, ')');
    if (close_paren == NULL || close_paren[1] != ' ' || close_paren[2] == 'Z')
        return 0;
    return (pid_t)pid;
}

static bool port_listening(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(NFS_PORT)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* The server settings: NFSv4 over TCP only, no NLM/RQUOTA/UDP, no grace period (sbx's clients
 * are fresh VMs with no state to reclaim, and a grace period would stall every first open for
 * 90 s after a server start), numeric owners (no idmapd in the guest). */
static int write_conf(const struct nfs_paths *p, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", p->conf);
    FILE *out = fopen(tmp, "we");
    if (out == NULL) {
        snprintf(err, errlen, "write %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(out,
            "# Generated by sbx (worker/host/nfs_export.c); rewritten on every export change.\n"
            "NFS_CORE_PARAM {\n  Protocols = 4;\n  NFS_Port = %d;\n  Enable_NLM = false;\n"
            "  Enable_RQUOTA = false;\n  Enable_UDP = false;\n}\n"
            "NFSv4 {\n  Graceless = true;\n  Lease_Lifetime = 15;\n  RecoveryBackend = fs;\n"
            "  RecoveryRoot = \"%s\";\n  Only_Numeric_Owners = true;\n}\n"
            "NFS_KRB5 {\n  Active_krb5 = false;\n}\n",
            NFS_PORT, p->recovery);
    DIR *d = opendir(p->exports);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= strlen(EXPORT_SUFFIX) ||
            strcmp(e->d_name + n - strlen(EXPORT_SUFFIX), EXPORT_SUFFIX) != 0)
            continue;
        char path[PATH_MAX + 300], buf[4096];
        snprintf(path, sizeof path, "%s/%s", p->exports, e->d_name);
        FILE *in = fopen(path, "re");
        if (in == NULL)
            continue;
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, got, out);
        fclose(in);
    }
    if (d)
        closedir(d);
    if (fclose(out) != 0 || rename(tmp, p->conf) != 0) {
        snprintf(err, errlen, "write %s: %s", p->conf, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Starts ganesha (it daemonizes; the pid file names the daemon) and waits until TCP 2049 takes
 * connections. TCP 2049 held by another server is an error that says so. */
static int start_server(const struct nfs_paths *p, char *err, size_t errlen)
{
    if (port_listening()) {
        snprintf(err, errlen,
                 "TCP %d is already served by another NFS server (not the one of %s); stop it",
                 NFS_PORT, p->dir);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* The server outlives this worker: it must not inherit the worker's descriptors (taps,
         * netlink, the store), signal mask (job threads block signals) or dispositions. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int s = 1; s < NSIG; s++)
            signal(s, SIG_DFL);
        syscall(SYS_close_range, 3U, ~0U, 0U);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2)
                close(null);
        }
        if (chdir(p->dir) != 0)
            _exit(126);
        execlp(GANESHA_BIN, GANESHA_BIN, "-f", p->conf, "-L", p->log, "-p", p->pid, "-N",
               "NIV_EVENT", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        snprintf(err, errlen, "cannot run %s (install nfs-ganesha and nfs-ganesha-vfs)",
                 GANESHA_BIN);
        return -1;
    }
    int64_t deadline = clock_mono_ms() + GANESHA_START_TIMEOUT_MS;
    while (clock_mono_ms() < deadline) {
        if (running_pid(p) > 0 && port_listening())
            return 0;
        sleep_ms(100);
    }
    snprintf(err, errlen, "%s did not serve TCP %d within %d s (see %s)", GANESHA_BIN, NFS_PORT,
             GANESHA_START_TIMEOUT_MS / 1000, p->log);
    return -1;
}

static long count_reloads(const struct nfs_paths *p)
{
    FILE *f = fopen(p->log, "re");
    long n = 0;
    char line[1024];
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, RELOAD_DONE))
            n++;
    fclose(f);
    return n;
}

/* Rewrites the config and makes the server apply it: a running one rereads its exports on
 * SIGHUP (waited for through its log); otherwise it is started, when there is anything to
 * export. */
static int apply(const struct nfs_paths *p, bool need_server, char *err, size_t errlen)
{
    if (write_conf(p, err, errlen) != 0)
        return -1;
    pid_t pid = running_pid(p);
    if (pid <= 0)
        return need_server ? start_server(p, err, errlen) : 0;
    long before = count_reloads(p);
    if (kill(pid, SIGHUP) != 0) {
        snprintf(err, errlen, "signal %s (pid %d): %s", GANESHA_BIN, (int)pid, strerror(errno));
        return -1;
    }
    int64_t deadline = clock_mono_ms() + GANESHA_RELOAD_TIMEOUT_MS;
    while (clock_mono_ms() < deadline) {
        if (count_reloads(p) > before)
            return 0;
        sleep_ms(50);
    }
    snprintf(err, errlen, "%s did not reread its exports within %d s (see %s)", GANESHA_BIN,
             GANESHA_RELOAD_TIMEOUT_MS / 1000, p->log);
    return -1;
}

/* ---------------------------------------------------------------- exports */

/* Sandbox ids are generated (id.h) but they become file names and config strings: refuse
 * anything but [A-Za-z0-9_-]. */
static bool id_ok(const char *id)
{
    if (id == NULL || id[0] == '\0' || strlen(id) > 128)
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-'))
            return false;
    return true;
}

/* A config string must not break out of its quotes. */
static bool conf_string_ok(const char *s)
{
    return s[0] == '/' && strpbrk(s, "\"\n\r\\") == NULL;
}

/* <exports>/<installation>-<sandboxId>.export (host_tag.h); with legacy, the bare-id name written
 * before exports were tagged with the installation. */
static void export_file(const struct nfs_paths *p, const char *sandbox_id, bool legacy, char *out,
                        size_t outlen)
{
    char name[160];
    if (legacy || host_tag_name(sandbox_id, name, sizeof name) != 0)
        snprintf(name, sizeof name, "%.128s", sandbox_id);
    snprintf(out, outlen, "%.3000s/%s%s", p->exports, name, EXPORT_SUFFIX);
}

int nfs_export_add(const struct sbx_config *cfg, const char *sandbox_id, const char *client_addr,
                   const char *dir, uint16_t export_id, char *pseudo_out, size_t pseudo_len,
                   char *err, size_t errlen)
{
    struct in_addr a;
    struct stat st;
    if (!id_ok(sandbox_id)) {
        snprintf(err, errlen, "bad sandbox id for an NFS export");
        return -1;
    }
    if (client_addr == NULL || inet_pton(AF_INET, client_addr, &a) != 1) {
        snprintf(err, errlen, "NFS export for %s: no IPv4 address for the Sandbox", sandbox_id);
        return -1;
    }
    if (export_id == 0) {
        snprintf(err, errlen, "NFS export id 0 is the pseudo root's");
        return -1;
    }
    if (!conf_string_ok(dir) || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "workspace %s is not a directory that can be exported", dir);
        return -1;
    }
    struct nfs_paths p;
    paths_of(cfg, &p);
    char path[PATH_MAX + 300], tmp[PATH_MAX + 310];
    int lk = lock_take(&p, err, errlen);
    if (lk < 0)
        return -1;
    export_file(&p, sandbox_id, false, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    int rc = -1;
    if (f == NULL) {
        snprintf(err, errlen, "write %s: %s", tmp, strerror(errno));
        goto out;
    }
    /* Access_Type None outside the CLIENT block: any other address, another Sandbox's included,
     * gets NFS4ERR_ACCESS even if the firewall let it through. */
    fprintf(f,
            "# sandbox %s of installation %s\nEXPORT {\n  Export_Id = %u;\n  Path = \"%s\";\n"
            "  Pseudo = \"%s/%s\";\n  Protocols = 4;\n  Transports = TCP;\n"
            "  Access_Type = None;\n  Squash = All_Squash;\n  Anonymous_Uid = %lld;\n"
            "  Anonymous_Gid = %lld;\n  SecType = sys;\n  FSAL {\n    Name = VFS;\n  }\n"
            "  CLIENT {\n    Clients = %s;\n    Access_Type = RW;\n  }\n}\n",
            sandbox_id, host_tag_installation()[0] ? host_tag_installation() : "-",
            (unsigned)export_id, dir, NFS_EXPORT_PSEUDO_ROOT, sandbox_id,
            (long long)cfg->sandbox_uid, (long long)cfg->sandbox_gid, client_addr);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "write %s: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (apply(&p, true, err, errlen) != 0) {
        unlink(path); /* not exported: leave no state that claims it is */
        goto out;
    }
    snprintf(pseudo_out, pseudo_len, "%s/%s", NFS_EXPORT_PSEUDO_ROOT, sandbox_id);
    rc = 0;
out:
    lock_release(lk);
    return rc;
}

int nfs_export_remove(const struct sbx_config *cfg, const char *sandbox_id, char *err,
                      size_t errlen)
{
    if (!id_ok(sandbox_id))
        return 0; /* nothing of ours can be named so */
    struct nfs_paths p;
    paths_of(cfg, &p);
    char path[2][PATH_MAX + 300];
    export_file(&p, sandbox_id, false, path[0], sizeof path[0]);
    export_file(&p, sandbox_id, true, path[1], sizeof path[1]);
    if (access(path[0], F_OK) != 0 && access(path[1], F_OK) != 0)
        return 0; /* the common case (no Workspace): no lock, no reload */
    int lk = lock_take(&p, err, errlen);
    if (lk < 0)
        return -1;
    int rc = 0;
    bool removed = false;
    for (int i = 0; i < 2 && rc == 0; i++) {
        if (unlink(path[i]) == 0)
            removed = true;
        else if (errno != ENOENT) {
            snprintf(err, errlen, "remove %s: %s", path[i], strerror(errno));
            rc = -1;
        }
    }
    if (removed && rc == 0)
        rc = apply(&p, false, err, errlen);
    lock_release(lk);
    return rc;
}

bool nfs_export_exists(const struct sbx_config *cfg, const char *sandbox_id)
{
    struct nfs_paths p;
    char path[PATH_MAX + 300], legacy[PATH_MAX + 300];
    if (!id_ok(sandbox_id))
        return false;
    paths_of(cfg, &p);
    export_file(&p, sandbox_id, false, path, sizeof path);
    export_file(&p, sandbox_id, true, legacy, sizeof legacy);
    return access(path, F_OK) == 0 || access(legacy, F_OK) == 0;
}

int nfs_export_reconcile(const struct sbx_config *cfg,
                         bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                         size_t *removed, char *err, size_t errlen)
{
    struct nfs_paths p;
    paths_of(cfg, &p);
    size_t n = 0;
    if (removed)
        *removed = 0;
    DIR *d = opendir(p.exports);
    if (d == NULL)
        return 0; /* never exported anything */
    closedir(d);
    int lk = lock_take(&p, err, errlen);
    if (lk < 0)
        return -1;
    d = opendir(p.exports);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char name[256], id[256];
        size_t len = strlen(e->d_name), sl = strlen(EXPORT_SUFFIX);
        if (len <= sl || len - sl >= sizeof name || strcmp(e->d_name + len - sl, EXPORT_SUFFIX))
            continue;
        memcpy(name, e->d_name, len - sl);
        name[len - sl] = '\0';
        /* Another installation's (it shares this data directory's exports only if it was pointed
         * at it) is left alone; an untagged one was written here by an older sbx of this data
         * directory, so it is judged as this installation's. */
        if (host_tag_owner(name, id, sizeof id) == HOST_TAG_OTHERS || is_live(id, arg))
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", p.exports, e->d_name);
        if (unlink(path) == 0) {
            n++;
            log_info("nfs: removed the export of %s (no longer running)", id);
        }
    }
    if (d)
        closedir(d);
    int rc = n > 0 ? apply(&p, false, err, errlen) : 0;
    lock_release(lk);
    if (removed)
        *removed = n;
    return rc;
}

int nfs_export_stop(const struct sbx_config *cfg, char *err, size_t errlen)
{
    struct nfs_paths p;
    paths_of(cfg, &p);
    pid_t pid = running_pid(&p);
    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && running_pid(&p) == pid; i++)
        sleep_ms(100);
    if (running_pid(&p) == pid) {
        kill(pid, SIGKILL);
        sleep_ms(200);
    }
    if (running_pid(&p) == pid) {
        snprintf(err, errlen, "%s pid %d did not exit", GANESHA_BIN, (int)pid);
        return -1;
    }
    unlink(p.pid);
    return 0;
}

/*
 * egress.c: the host-wide egress settings applied by the worker: the firewall's sets, the
 * Sandboxes' resolv.conf file, the guest kernel argument (egress.h).
 */
#include "host/egress.h"

#include "host/links.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock;
    bool ready;
    struct egress_settings settings;
    char resolv_conf[600];
} egress = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Written to a temporary name and renamed, so a Sandbox booting meanwhile never binds half a
 * file; world-readable: the Sandbox's uid reads it through the bind mount. */
static int write_resolv_conf(const char *path, const struct egress_settings *s, char *err,
                             size_t errlen)
{
    char text[1024], tmp[620];
    if (egress_resolv_conf_text(s, text, sizeof text) < 0) {
        snprintf(err, errlen, "resolv.conf: too many resolvers");
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len && fchmod(fd, 0644) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok)
            e = errno;
        unlink(tmp);
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

int net_egress_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
    pthread_mutex_lock(&egress.lock);
    int rc = 0;
    if (egress.ready)
        goto out;
    const char *resolv = getenv("SBX_TEST_RESOLV_CONF");
    struct egress_settings s;
    rc =
        egress_settings_load(cfg->egress_ports, cfg->dns_resolvers,
                             resolv && *resolv ? resolv : EGRESS_HOST_RESOLV_CONF, &s, err, errlen);
    if (rc < 0)
        goto out;
    struct fw *fw = net_firewall();
    if (fw &&
        (rc = fw_set_egress(fw, s.ports, s.nports, s.resolvers, s.nresolvers, err, errlen)) < 0)
        goto out;
    char path[600];
    snprintf(path, sizeof path, "%.500s/run/resolv.conf", cfg->data_dir);
    char why[700];
    if (config_make_data_dirs(cfg, why, sizeof why) == 0 &&
        write_resolv_conf(path, &s, why, sizeof why) == 0)
        snprintf(egress.resolv_conf, sizeof egress.resolv_conf, "%s", path);
    else
        log_warn("egress: Sandboxes keep their image's resolv.conf: %s", why);
    if (s.nresolvers == 0)
        log_warn("egress: no DNS resolver (dns_resolvers is %s): DNS from Sandboxes is refused",
                 s.resolvers_from_host ? "unset and /etc/resolv.conf names no public one" : "none");
    else
        log_info("egress: TCP to public IPv4 on %zu port(s), DNS to %zu resolver(s)%s", s.nports,
                 s.nresolvers, s.resolvers_from_host ? " (from /etc/resolv.conf)" : "");
    egress.settings = s;
    egress.ready = true;
out:
    pthread_mutex_unlock(&egress.lock);
    return rc;
}

const struct egress_settings *net_egress_settings(void)
{
    pthread_mutex_lock(&egress.lock);
    const struct egress_settings *s = egress.ready ? &egress.settings : NULL;
    pthread_mutex_unlock(&egress.lock);
    return s;
}

const char *net_egress_resolv_conf(void)
{
    pthread_mutex_lock(&egress.lock);
    const char *p = egress.resolv_conf;
    pthread_mutex_unlock(&egress.lock);
    return p;
}

void net_egress_kernel_arg(char *out, size_t outlen)
{
    const struct egress_settings *s = net_egress_settings();
    size_t n = (size_t)snprintf(out, outlen, "sbx.dns=");
    for (size_t i = 0; s && i < s->nresolvers && n < outlen; i++) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &s->resolvers[i], a, sizeof a);
        n += (size_t)snprintf(out + n, outlen - n, "%s%s", i ? "," : "", a);
    }
}

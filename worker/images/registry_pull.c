/*
 * registry_pull.c: the OCI distribution API with libcurl (registry_pull.h).
 *
 * Hidden state: one struct pull per call holds the curl handle and the Authorization header the
 * registry accepted (reused for every later request of the same pull). libcurl's global state is
 * initialised by the first curl_easy_init(), which is safe here because a worker runs one import
 * at a time and nothing else in it uses libcurl.
 */
#include "images/registry_pull.h"
#include "images/image_cache.h"
#include "images/layer_apply.h"
#include "clock.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_LIMIT (4u << 20)
#define ACCEPT_MANIFESTS                                                                           \
    "Accept: application/vnd.oci.image.index.v1+json, "                                            \
    "application/vnd.oci.image.manifest.v1+json, "                                                 \
    "application/vnd.docker.distribution.manifest.list.v2+json, "                                  \
    "application/vnd.docker.distribution.manifest.v2+json"

int registry_ref_parse(const char *reference, struct registry_ref *out)
{
    memset(out, 0, sizeof *out);
    const char *slash = strchr(reference, '/');
    if (!slash || slash == reference || (size_t)(slash - reference) >= sizeof out->host)
        return -1;
    snprintf(out->host, sizeof out->host, "%.*s", (int)(slash - reference), reference);
    const char *rest = slash + 1;
    const char *at = strchr(rest, '@');
    const char *last_slash = strrchr(rest, '/');
    const char *colon = strrchr(last_slash ? last_slash : rest, ':');
    size_t repo_len;
    if (at) {
        repo_len = (size_t)(at - rest);
        if (!image_digest_valid(at + 1))
            return -1;
        snprintf(out->ref, sizeof out->ref, "%s", at + 1);
        out->by_digest = 1;
    } else if (colon) {
        repo_len = (size_t)(colon - rest);
        if (!colon[1] || strlen(colon + 1) >= 128)
            return -1;
        snprintf(out->ref, sizeof out->ref, "%s", colon + 1);
    } else {
        repo_len = strlen(rest);
        snprintf(out->ref, sizeof out->ref, "latest");
    }
    if (repo_len == 0 || repo_len >= sizeof out->repo)
        return -1;
    snprintf(out->repo, sizeof out->repo, "%.*s", (int)repo_len, rest);
    for (const char *p = out->repo; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("._-/", *p)))
            return -1;
    for (const char *p = out->ref; !out->by_digest && *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("._-", *p)))
            return -1;
    return 0;
}

struct pull {
    CURL *curl;
    const struct sbx_config *cfg;
    struct registry_ref ref;
    const char *scheme;
    char user[256], pass[1024];
    bool have_creds;
    char auth[4096]; /* "Authorization: ..." once the registry asked for it; "" before */
    struct image_problem *p;
    int64_t fetched;     /* blob bytes so far, against image_upload_limit */
    int64_t deadline_ms; /* clock_mono_ms() when registry_pull_timeout ends */
};

/* Where a response goes: memory (manifests, tokens) or a file hashed as it is written (blobs). */
struct sink {
    char *buf;
    size_t len, limit;
    int fd;
    struct image_hasher hash;
    struct pull *pl;
    bool over;
    char www_auth[1024]; /* the WWW-Authenticate header of a 401 */
    char content_type[200];
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct sink *s = arg;
    size_t n = size * nmemb;
    if (s->fd >= 0) {
        if ((s->pl->fetched += (int64_t)n) > s->pl->cfg->image_upload_limit) {
            s->over = true;
            return 0;
        }
        image_hasher_update(&s->hash, data, n);
        for (size_t off = 0; off < n;) {
            ssize_t w = write(s->fd, data + off, n - off);
            if (w < 0)
                return 0;
            off += (size_t)w;
        }
        return n;
    }
    if (s->len + n > s->limit) {
        s->over = true;
        return 0;
    }
    char *grown = realloc(s->buf, s->len + n + 1);
    if (!grown)
        return 0;
    s->buf = grown;
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct sink *s = arg;
    size_t n = size * nmemb;
    if (n > 17 && strncasecmp(data, "WWW-Authenticate:", 17) == 0)
        snprintf(s->www_auth, sizeof s->www_auth, "%.*s", (int)(n - 17), data + 17);
    else if (n > 13 && strncasecmp(data, "Content-Type:", 13) == 0)
        snprintf(s->content_type, sizeof s->content_type, "%.*s", (int)(n - 13), data + 13);
    /* Headers of a redirect's target replace the first response's. */
    else if (n > 5 && strncmp(data, "HTTP/", 5) == 0)
        s->content_type[0] = '\0';
    for (char *f = s->www_auth; *f; f++)
        if (*f == '\r' || *f == '\n')
            *f = '\0';
    for (char *f = s->content_type; *f; f++)
        if (*f == '\r' || *f == '\n' || *f == ';')
            *f = '\0';
    return n;
}

/* One GET; returns the HTTP status, or -1 for a transport failure (with the problem set). */
static long http_get(struct pull *pl, const char *url, const char *accept, const char *auth,
                     struct sink *s)
{
    struct curl_slist *hdrs = NULL;
    long status = 0;
    char errbuf[CURL_ERROR_SIZE] = "";
    if (accept)
        hdrs = curl_slist_append(hdrs, accept);
    if (auth && *auth)
        hdrs = curl_slist_append(hdrs, auth);
    curl_easy_reset(pl->curl);
    curl_easy_setopt(pl->curl, CURLOPT_URL, url);
    curl_easy_setopt(pl->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(pl->curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(pl->curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(pl->curl, CURLOPT_MAXREDIRS, 5L);
    /* Every request of a pull shares its time limit, and a registry that trickles (or stops)
     * fails it sooner: a pull holds the worker's one import slot. */
    int64_t left = pl->deadline_ms - clock_mono_ms();
    if (left <= 0)
        return image_fail(pl->p, IMAGE_REGISTRY_TOO_SLOW,
                          "the pull from %s took longer than registry_pull_timeout (%lld s)",
                          pl->ref.host, (long long)pl->cfg->registry_pull_timeout);
    curl_easy_setopt(pl->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(pl->curl, CURLOPT_TIMEOUT_MS, (long)left);
    curl_easy_setopt(pl->curl, CURLOPT_LOW_SPEED_LIMIT, (long)pl->cfg->registry_low_speed_limit);
    curl_easy_setopt(pl->curl, CURLOPT_LOW_SPEED_TIME, (long)pl->cfg->registry_low_speed_time);
    curl_easy_setopt(pl->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(pl->curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(pl->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(pl->curl, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(pl->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(pl->curl, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(pl->curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(pl->curl, CURLOPT_USERAGENT, "sbx-worker");
    CURLcode rc = curl_easy_perform(pl->curl);
    curl_slist_free_all(hdrs);
    if (s->over)
        return image_fail(pl->p, IMAGE_ARCHIVE_TOO_LARGE,
                          "the image is over image_upload_limit (%lld bytes)",
                          (long long)pl->cfg->image_upload_limit);
    if (rc == CURLE_OPERATION_TIMEDOUT && strstr(errbuf, "too slow"))
        return image_fail(pl->p, IMAGE_REGISTRY_TOO_SLOW,
                          "%s sent less than registry_low_speed_limit (%lld bytes/s) for "
                          "registry_low_speed_time (%lld s)",
                          pl->ref.host, (long long)pl->cfg->registry_low_speed_limit,
                          (long long)pl->cfg->registry_low_speed_time);
    /* The request's time limit is what was left of the pull's: curl's timer and this clock
     * differ by a millisecond or so, so the pull's deadline is judged by what curl says (a
     * connect that timed out is the registry unreachable, below). */
    if (rc == CURLE_OPERATION_TIMEDOUT && strncmp(errbuf, "Operation timed out", 19) == 0)
        return image_fail(pl->p, IMAGE_REGISTRY_TOO_SLOW,
                          "the pull from %s took longer than registry_pull_timeout (%lld s)",
                          pl->ref.host, (long long)pl->cfg->registry_pull_timeout);
    if (rc != CURLE_OK)
        return image_fail(pl->p, IMAGE_REGISTRY_UNREACHABLE, "%s: %s", pl->ref.host,
                          errbuf[0] ? errbuf : curl_easy_strerror(rc));
    curl_easy_getinfo(pl->curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* A parameter of a WWW-Authenticate challenge: name="value". */
static void challenge_param(const char *ch, const char *name, char *out, size_t outlen)
{
    char key[64];
    snprintf(key, sizeof key, "%s=\"", name);
    const char *at = strstr(ch, key);
    out[0] = '\0';
    if (!at)
        return;
    at += strlen(key);
    const char *end = strchr(at, '"');
    if (end)
        snprintf(out, outlen, "%.*s", (int)(end - at), at);
}

/* After a 401: the Authorization header the challenge asks for (basic, or a bearer token from
 * the realm). Returns 0, or -1 with the problem. */
static int authorize(struct pull *pl, const char *challenge)
{
    while (*challenge == ' ')
        challenge++;
    if (strncasecmp(challenge, "Basic", 5) == 0) {
        if (!pl->have_creds)
            return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED,
                              "%s wants credentials and none were given", pl->ref.host);
        char plain[1400], b64[2000];
        snprintf(plain, sizeof plain, "%s:%s", pl->user, pl->pass);
        static const char tbl[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = strlen(plain), o = 0;
        for (size_t i = 0; i < n; i += 3) {
            unsigned v = (unsigned char)plain[i] << 16;
            if (i + 1 < n)
                v |= (unsigned char)plain[i + 1] << 8;
            if (i + 2 < n)
                v |= (unsigned char)plain[i + 2];
            b64[o++] = tbl[(v >> 18) & 63];
            b64[o++] = tbl[(v >> 12) & 63];
            b64[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
            b64[o++] = i + 2 < n ? tbl[v & 63] : '=';
        }
        b64[o] = '\0';
        snprintf(pl->auth, sizeof pl->auth, "Authorization: Basic %s", b64);
        return 0;
    }
    if (strncasecmp(challenge, "Bearer", 6) != 0)
        return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED,
                          "%s asks for an unknown authentication scheme", pl->ref.host);
    char realm[1024], service[256], scope[600], url[2400];
    challenge_param(challenge, "realm", realm, sizeof realm);
    challenge_param(challenge, "service", service, sizeof service);
    challenge_param(challenge, "scope", scope, sizeof scope);
    if (strncmp(realm, "https://", 8) != 0 && strncmp(realm, "http://", 7) != 0)
        return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED, "%s names no token realm",
                          pl->ref.host);
    char *es = curl_easy_escape(pl->curl, service, 0), *esc = curl_easy_escape(pl->curl, scope, 0);
    snprintf(url, sizeof url, "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
             es ? es : "", esc ? esc : "");
    curl_free(es);
    curl_free(esc);
    /* The token endpoint takes the credentials as basic auth. */
    char basic[4096] = "";
    if (pl->have_creds) {
        char saved[sizeof pl->auth];
        snprintf(saved, sizeof saved, "%s", pl->auth);
        if (authorize(pl, "Basic") != 0)
            return -1;
        snprintf(basic, sizeof basic, "%s", pl->auth);
        snprintf(pl->auth, sizeof pl->auth, "%s", saved);
    }
    struct sink s = {.fd = -1, .limit = 1 << 20, .pl = pl};
    long st = http_get(pl, url, NULL, basic, &s);
    if (st < 0) {
        free(s.buf);
        return -1;
    }
    if (st == 401 || st == 403) {
        free(s.buf);
        return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED, "%s refused the credentials",
                          pl->ref.host);
    }
    json_t *j = st == 200 && s.buf ? json_loads(s.buf, 0, NULL) : NULL;
    free(s.buf);
    const char *tok = json_string_value(json_object_get(j, "token"));
    if (!tok)
        tok = json_string_value(json_object_get(j, "access_token"));
    if (!tok) {
        json_decref(j);
        return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED,
                          "%s's token endpoint gave no token (HTTP %ld)", pl->ref.host, st);
    }
    snprintf(pl->auth, sizeof pl->auth, "Authorization: Bearer %s", tok);
    json_decref(j);
    return 0;
}

/* GET /v2/<repo>/<kind>/<ref> with authentication as the registry asks. */
static long reg_get(struct pull *pl, const char *kind, const char *ref, const char *accept,
                    struct sink *s)
{
    char url[1200];
    snprintf(url, sizeof url, "%s://%s/v2/%s/%s/%s", pl->scheme, pl->ref.host, pl->ref.repo, kind,
             ref);
    long st = http_get(pl, url, accept, pl->auth, s);
    if (st == 401 && !pl->auth[0]) {
        if (authorize(pl, s->www_auth) != 0)
            return -1;
        /* Start the body over. */
        free(s->buf);
        s->buf = NULL;
        s->len = 0;
        if (s->fd >= 0) {
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0)
                return image_fail(pl->p, IMAGE_IO_ERROR, "cannot rewind a blob");
            image_hasher_init(&s->hash);
        }
        st = http_get(pl, url, accept, pl->auth, s);
    }
    if (st < 0)
        return -1;
    if (st == 401 || st == 403)
        return image_fail(pl->p, IMAGE_REGISTRY_UNAUTHORIZED, "%s refused %s (HTTP %ld)",
                          pl->ref.host, pl->have_creds ? "the credentials" : "an anonymous pull",
                          st);
    if (st == 404)
        return image_fail(pl->p, IMAGE_REGISTRY_NOT_FOUND, "%s has no %s %s in %s", pl->ref.host,
                          kind, ref, pl->ref.repo);
    if (st != 200)
        return image_fail(pl->p, IMAGE_REGISTRY_UNREACHABLE, "%s answered HTTP %ld for %s %s",
                          pl->ref.host, st, kind, ref);
    return st;
}

/* A manifest by tag or digest into memory; verified when asked by digest. Its own digest goes to
 * digest_out. */
static char *get_manifest(struct pull *pl, const char *ref, bool by_digest, char *media,
                          size_t medialen, char digest_out[IMAGE_DIGEST_LEN])
{
    struct sink s = {.fd = -1, .limit = MANIFEST_LIMIT, .pl = pl};
    if (reg_get(pl, "manifests", ref, ACCEPT_MANIFESTS, &s) < 0 || !s.buf) {
        if (!pl->p->code)
            image_fail(pl->p, IMAGE_BAD_MANIFEST, "%s sent an empty manifest", pl->ref.host);
        free(s.buf);
        return NULL;
    }
    struct image_hasher h;
    char d[IMAGE_DIGEST_LEN];
    image_hasher_init(&h);
    image_hasher_update(&h, s.buf, s.len);
    image_hasher_final(&h, d);
    snprintf(digest_out, IMAGE_DIGEST_LEN, "%s", d);
    if (by_digest) {
        if (strcmp(d, ref) != 0) {
            image_fail(pl->p, IMAGE_DIGEST_MISMATCH, "the manifest %s from %s has digest %s", ref,
                       pl->ref.host, d);
            free(s.buf);
            return NULL;
        }
    }
    json_t *j = json_loads(s.buf, 0, NULL);
    const char *mt = json_string_value(json_object_get(j, "mediaType"));
    snprintf(media, medialen, "%s", mt ? mt : s.content_type);
    json_decref(j);
    return s.buf;
}

/* A blob by digest into dir/<hex>, verified. */
static int get_blob(struct pull *pl, const char *dir, const char *digest, char *path,
                    size_t pathlen)
{
    struct sink s = {.pl = pl};
    char got[IMAGE_DIGEST_LEN];
    snprintf(path, pathlen, "%s/%s", dir, digest + 7);
    if (access(path, F_OK) == 0)
        return 0; /* a layer the manifest lists twice */
    s.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s.fd < 0)
        return image_fail(pl->p, IMAGE_IO_ERROR, "cannot create %s: %s", path, strerror(errno));
    image_hasher_init(&s.hash);
    long st = reg_get(pl, "blobs", digest, NULL, &s);
    int rc = close(s.fd);
    if (st < 0) {
        unlink(path);
        return -1;
    }
    if (rc != 0) {
        unlink(path);
        return image_fail(pl->p, IMAGE_IO_ERROR, "cannot write %s: %s", path, strerror(errno));
    }
    image_hasher_final(&s.hash, got);
    if (strcmp(got, digest) != 0) {
        unlink(path);
        return image_fail(pl->p, IMAGE_DIGEST_MISMATCH, "blob %s from %s has digest %s", digest,
                          pl->ref.host, got);
    }
    return 0;
}

/* Whether host[:port] is in the comma-separated insecure_registries. */
static bool insecure(const char *list, const char *host)
{
    size_t n = strlen(host);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ", ");
        if (len == n && strncmp(p, host, n) == 0)
            return true;
        p += len;
    }
    return false;
}

static int pull_into(struct pull *pl, const char *work, struct import_result *res)
{
    struct image_problem *p = pl->p;
    char media[200], manifest_digest[IMAGE_DIGEST_LEN], config[IMAGE_DIGEST_LEN];
    char blobs[4200], path[4400];
    char(*layers)[IMAGE_DIGEST_LEN] = NULL;
    size_t n_layers = 0;
    struct image_plan plan = {0};
    int rc = -1;

    char *text =
        get_manifest(pl, pl->ref.ref, pl->ref.by_digest, media, sizeof media, res->manifest_digest);
    if (text && image_media_is_index(media)) {
        if (image_pick_platform(text, manifest_digest, p) == 0) {
            free(text);
            text =
                get_manifest(pl, manifest_digest, true, media, sizeof media, res->manifest_digest);
        } else {
            free(text);
            text = NULL;
        }
    }
    if (!text)
        return -1;
    if (strstr(media, "v1+prettyjws") || strstr(media, "manifest.v1+json")) {
        free(text);
        return image_fail(p, IMAGE_UNSUPPORTED, "Docker schema 1 manifests are not supported");
    }
    rc = image_manifest_parse(text, config, &layers, &n_layers, p);
    free(text);
    text = NULL;
    snprintf(blobs, sizeof blobs, "%s/blobs", work);
    if (!rc && mkdir(blobs, 0700) != 0)
        rc = image_fail(p, IMAGE_IO_ERROR, "cannot create %s: %s", blobs, strerror(errno));
    if (!rc)
        rc = get_blob(pl, blobs, config, plan.config_path, sizeof plan.config_path);
    if (!rc) {
        snprintf(plan.digest, sizeof plan.digest, "%s", config);
        text = image_read_small(plan.config_path, MANIFEST_LIMIT, p);
        rc = text ? image_config_parse(text, n_layers, &plan, &plan.diff_ids, p) : -1;
        free(text);
    }
    /* A digest this host has already needs no layers: import_plan reuses it. */
    bool cached = !rc && image_cache_ready(pl->cfg, plan.digest);
    for (size_t i = 0; !rc && !cached && i < n_layers; i++) {
        char **grown = realloc(plan.layers, (i + 1) * sizeof *grown);
        if (!grown) {
            rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
            break;
        }
        plan.layers = grown;
        if ((rc = get_blob(pl, blobs, layers[i], path, sizeof path)) == 0 &&
            !(plan.layers[i] = strdup(path)))
            rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
        if (!rc)
            plan.n_layers = i + 1;
    }
    if (!rc)
        rc = import_plan(pl->cfg, work, &plan, res);
    if (!rc && cached)
        res->layer_count = (int64_t)n_layers;
    free(layers);
    image_plan_free(&plan);
    return rc;
}

int registry_pull(const struct sbx_config *cfg, const char *work_id, const char *reference,
                  const char *credentials_json, struct import_result *res)
{
    struct pull pl = {.cfg = cfg,
                      .p = &res->problem,
                      .deadline_ms = clock_mono_ms() + cfg->registry_pull_timeout * 1000};
    char work[4096];
    int rc;

    if (registry_ref_parse(reference, &pl.ref) != 0)
        return image_fail(pl.p, IMAGE_BAD_REFERENCE,
                          "'%.300s' is not HOST[:PORT]/REPO[:TAG] or "
                          "HOST[:PORT]/REPO@sha256:<hex>",
                          reference);
    if (credentials_json) {
        json_t *c = json_loads(credentials_json, 0, NULL);
        const char *u = json_string_value(json_object_get(c, "username"));
        const char *pw = json_string_value(json_object_get(c, "password"));
        if (u && pw) {
            snprintf(pl.user, sizeof pl.user, "%s", u);
            snprintf(pl.pass, sizeof pl.pass, "%s", pw);
            pl.have_creds = true;
        }
        json_decref(c);
    }
    pl.scheme = insecure(cfg->insecure_registries, pl.ref.host) ? "http" : "https";
    if (import_work_dir(cfg, work_id, work, sizeof work) != 0)
        return image_fail(pl.p, IMAGE_IO_ERROR, "bad work directory for '%s'", work_id);
    (void)import_remove_tree(work);
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/images/tmp", cfg->data_dir);
    char images[4200];
    snprintf(images, sizeof images, "%s/images", cfg->data_dir);
    (void)mkdir(images, 0755);
    (void)mkdir(parent, 0700);
    if (mkdir(work, 0700) != 0)
        return image_fail(pl.p, IMAGE_IO_ERROR, "cannot create %s: %s", work, strerror(errno));
    pl.curl = curl_easy_init();
    if (!pl.curl)
        rc = image_fail(pl.p, IMAGE_IO_ERROR, "cannot start libcurl");
    else
        rc = pull_into(&pl, work, res);
    if (pl.curl)
        curl_easy_cleanup(pl.curl);
    memset(pl.pass, 0, sizeof pl.pass);
    memset(pl.auth, 0, sizeof pl.auth);
    (void)import_remove_tree(work);
    return rc;
}

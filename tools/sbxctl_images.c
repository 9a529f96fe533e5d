/*
 * sbxctl_images.c: `sbxctl image push|pull|ls|rm`, the operator's side of Images (docs/images.md).
 *
 * Every one goes through the gateway with the admin token (an upload must, and the others stay
 * authorised and audited like any request): push streams the archive with libcurl (a progress bar
 * on stderr when it is a terminal) and then follows the import until it is ready or failed; pull
 * asks for a registry pull and follows it the same way; ls and rm are plain requests.
 */
#include "sbxctl.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct progress {
    bool tty;
    curl_off_t total;
    time_t last;
};

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct progress *pr = arg;
    (void)dltotal, (void)dlnow, (void)ultotal;
    time_t now = time(NULL);
    if (!pr->tty || pr->total <= 0 || (now == pr->last && ulnow < pr->total))
        return 0;
    pr->last = now;
    int width = 40, done = (int)(ulnow * width / pr->total);
    fprintf(stderr, "\r[%.*s%*s] %3d%% %lld/%lld MiB", done,
            "########################################", width - done, "",
            (int)(ulnow * 100 / pr->total), (long long)(ulnow >> 20), (long long)(pr->total >> 20));
    return 0;
}

struct buf {
    char *data;
    size_t len;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct buf *b = arg;
    size_t n = size * nmemb;
    char *grown = realloc(b->data, b->len + n + 1);
    if (!grown)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* The gateway's base URL (ctl_gateway: cfg.listen, every-address listeners on loopback), and for
 * HTTPS the name its certificate is checked for in the URL, with connect_to (CURLOPT_CONNECT_TO)
 * saying where that name is reached. */
static int base_url(const struct ctl *ctl, char *out, size_t outlen, char *connect_to,
                    size_t connect_to_len)
{
    struct ctl_gateway g;
    char err[300];
    if (ctl_gateway(ctl, &g, err, sizeof err) != 0) {
        fprintf(stderr, "sbxctl image: %s\n", err);
        return -1;
    }
    bool v6 = strchr(g.host, ':') != NULL, name_v6 = strchr(g.name, ':') != NULL;
    connect_to[0] = '\0';
    if (!g.https) {
        snprintf(out, outlen, "http://%s%s%s:%s", v6 ? "[" : "", g.host, v6 ? "]" : "", g.port);
        return 0;
    }
    snprintf(out, outlen, "https://%s%s%s:%s", name_v6 ? "[" : "", g.name, name_v6 ? "]" : "",
             g.port);
    snprintf(connect_to, connect_to_len, "::%s%s%s:%s", v6 ? "[" : "", g.host, v6 ? "]" : "",
             g.port);
    return 0;
}

/* POSTs to /v1/images: the file at path (upload) or a JSON body. Returns the HTTP status (-1 on
 * a transport error, printed) with the answer in *answer. */
static long post_image(const struct ctl *ctl, const char *query, const char *path, const char *json,
                       char **answer)
{
    char url[1200], auth[400], connect_to[300];
    struct buf b = {0};
    struct progress pr = {.tty = isatty(2) == 1};
    struct curl_slist *hdrs = NULL, *connect = NULL;
    FILE *f = NULL;
    long status = -1;
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    if (base_url(ctl, url, sizeof url, connect_to, sizeof connect_to) != 0) {
        curl_easy_cleanup(c);
        return -1;
    }
    snprintf(url + strlen(url), sizeof url - strlen(url), "/v1/images%s", query);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", ctl->cfg.admin_token);
    hdrs = curl_slist_append(hdrs, auth);
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (path) {
        struct stat sb;
        f = fopen(path, "rb");
        if (!f || fstat(fileno(f), &sb) != 0) {
            fprintf(stderr, "sbxctl image push: %s: %s\n", path, strerror(errno));
            goto out;
        }
        pr.total = sb.st_size;
        hdrs = curl_slist_append(hdrs, "Content-Type: application/x-tar");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READDATA, f);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)sb.st_size);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pr);
    } else {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (connect_to[0]) {
        connect = curl_slist_append(NULL, connect_to);
        curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect);
        curl_easy_setopt(c, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
        if (ctl->ca_file[0])
            curl_easy_setopt(c, CURLOPT_CAINFO, ctl->ca_file);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sbxctl");
    CURLcode rc = curl_easy_perform(c);
    if (pr.tty && path)
        fputc('\n', stderr);
    if (rc != CURLE_OK) {
        fprintf(stderr, "sbxctl image: %s: %s (%s)\n", url, curl_easy_strerror(rc),
                rc == CURLE_PEER_FAILED_VERIFICATION
                    ? "trust the gateway's CA with --ca-file or SBXCTL_CA_FILE"
                    : "is sbx-gateway running?");
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    *answer = b.data ? b.data : strdup("");
    b.data = NULL;
out:
    free(b.data);
    if (f)
        fclose(f);
    curl_slist_free_all(hdrs);
    curl_slist_free_all(connect);
    curl_easy_cleanup(c);
    return status;
}

/* Prints a problem answer's detail (or the raw answer) and gives the exit code. */
static int report_problem(const char *what, long status, const char *answer)
{
    json_t *j = json_loads(answer ? answer : "", 0, NULL);
    const char *detail = json_string_value(json_object_get(j, "detail"));
    const char *code = json_string_value(json_object_get(j, "code"));
    fprintf(stderr, "sbxctl image %s: HTTP %ld %s: %s\n", what, status, code ? code : "",
            detail ? detail : (answer ? answer : ""));
    json_decref(j);
    return status == 404 ? CTL_FAIL : status >= 500 ? CTL_ERROR : CTL_FAIL;
}

static void print_image(const struct ctl *ctl, json_t *im)
{
    if (ctl->json) {
        ctl_print_json(im, false);
        return;
    }
    json_t *problem = json_object_get(im, "problem");
    printf("%s %s: %s", json_string_value(json_object_get(im, "id")),
           json_string_value(json_object_get(im, "name")),
           json_string_value(json_object_get(im, "state")));
    if (json_is_object(problem))
        printf(" (%s: %s)", json_string_value(json_object_get(problem, "code")),
               json_string_value(json_object_get(problem, "detail")));
    if (json_is_string(json_object_get(im, "digest")))
        printf(" %s, %lld layers, %lld bytes", json_string_value(json_object_get(im, "digest")),
               (long long)json_integer_value(json_object_get(im, "layerCount")),
               (long long)json_integer_value(json_object_get(im, "unpackedBytes")));
    printf("\n");
}

/* Follows an Image until its import ends; 0 when ready, CTL_FAIL when failed. */
static int follow(struct ctl *ctl, const char *id, bool quiet_wait)
{
    char path[200], err[300];
    for (int i = 0;; i++) {
        int status = 0;
        char *body = NULL;
        snprintf(path, sizeof path, "/v1/images/%s", id);
        if (ctl_http(ctl, "GET", path, &status, &body, err, sizeof err) != 0) {
            fprintf(stderr, "sbxctl image: %s\n", err);
            return CTL_ERROR;
        }
        json_t *im = status == 200 ? json_loads(body, 0, NULL) : NULL;
        const char *state = json_string_value(json_object_get(im, "state"));
        if (!im || !state) {
            int rc = report_problem("follow", status, body);
            free(body);
            json_decref(im);
            return rc;
        }
        free(body);
        if (strcmp(state, "importing") != 0) {
            print_image(ctl, im);
            int rc = strcmp(state, "ready") == 0 ? CTL_OK : CTL_FAIL;
            json_decref(im);
            return rc;
        }
        json_decref(im);
        if (!quiet_wait && isatty(2) && i % 10 == 0)
            fprintf(stderr, "importing...\n");
        usleep(200 * 1000);
    }
}

static int image_push(struct ctl *ctl, const struct ctl_command *cmd, int argc, char **argv)
{
    const char *name = NULL, *pos[1];
    bool no_wait = false;
    const struct ctl_opt opts[] = {{"--name", &name, NULL}, {"--no-wait", NULL, &no_wait}, {0}};
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1 || !name)
        return ctl_usage_error(cmd, "push takes FILE and --name NAME");
    char *q = curl_easy_escape(NULL, name, 0), query[400], *answer = NULL;
    snprintf(query, sizeof query, "?name=%s", q ? q : "");
    curl_free(q);
    long status = post_image(ctl, query, pos[0], NULL, &answer);
    if (status < 0)
        return CTL_ERROR;
    if (status != 202) {
        rc = report_problem("push", status, answer);
        free(answer);
        return rc;
    }
    json_t *im = json_loads(answer, 0, NULL);
    free(answer);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(im, "id")));
    if (no_wait || !id[0]) {
        print_image(ctl, im);
        json_decref(im);
        return CTL_OK;
    }
    json_decref(im);
    return follow(ctl, id, false);
}

static int image_pull(struct ctl *ctl, const struct ctl_command *cmd, int argc, char **argv)
{
    const char *name = NULL, *user = NULL, *pos[1];
    bool no_wait = false, password_stdin = false;
    const struct ctl_opt opts[] = {{"--name", &name, NULL},
                                   {"--username", &user, NULL},
                                   {"--password-stdin", NULL, &password_stdin},
                                   {"--no-wait", NULL, &no_wait},
                                   {0}};
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, opts, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1 || !name)
        return ctl_usage_error(cmd, "pull takes REFERENCE and --name NAME");
    /* The password never goes on the command line, where ps would show it. */
    char password[1100] = "";
    const char *env_pw = getenv("SBX_REGISTRY_PASSWORD");
    if (password_stdin) {
        if (!fgets(password, sizeof password, stdin))
            password[0] = '\0';
        password[strcspn(password, "\r\n")] = '\0';
    } else if (env_pw) {
        snprintf(password, sizeof password, "%s", env_pw);
    }
    if (user && !password[0])
        return ctl_usage_error(cmd, "--username needs a password: --password-stdin or "
                                    "SBX_REGISTRY_PASSWORD");
    json_t *body = json_pack("{s:s,s:s}", "name", name, "reference", pos[0]);
    if (user) {
        json_object_set_new(body, "username", json_string(user));
        json_object_set_new(body, "password", json_string(password));
    }
    memset(password, 0, sizeof password);
    char *text = json_dumps(body, JSON_COMPACT), *answer = NULL;
    json_decref(body);
    long status = text ? post_image(ctl, "", NULL, text, &answer) : -1;
    free(text);
    if (status < 0)
        return CTL_ERROR;
    if (status != 202) {
        rc = report_problem("pull", status, answer);
        free(answer);
        return rc;
    }
    json_t *im = json_loads(answer, 0, NULL);
    free(answer);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(im, "id")));
    if (no_wait || !id[0]) {
        print_image(ctl, im);
        json_decref(im);
        return CTL_OK;
    }
    json_decref(im);
    return follow(ctl, id, false);
}

static int image_ls(struct ctl *ctl, const struct ctl_command *cmd, int argc, char **argv)
{
    const char *pos[1];
    int npos, rc;
    if (ctl_parse(cmd, argc, argv, NULL, pos, 0, &npos, &rc) != 0)
        return rc;
    json_t *rows = json_array();
    char path[200] = "/v1/images?limit=200", err[300];
    for (;;) {
        int status = 0;
        char *body = NULL;
        if (ctl_http(ctl, "GET", path, &status, &body, err, sizeof err) != 0) {
            fprintf(stderr, "sbxctl image ls: %s\n", err);
            json_decref(rows);
            return CTL_ERROR;
        }
        json_t *page = status == 200 ? json_loads(body, 0, NULL) : NULL;
        if (!page) {
            rc = report_problem("ls", status, body);
            free(body);
            json_decref(rows);
            return rc;
        }
        free(body);
        size_t i;
        json_t *im;
        json_array_foreach(json_object_get(page, "items"), i, im)
        {
            json_t *p = json_object_get(im, "problem");
            json_object_set_new(im, "problemCode",
                                json_is_object(p) ? json_incref(json_object_get(p, "code"))
                                                  : json_null());
            json_array_append(rows, im);
        }
        const char *next = json_string_value(json_object_get(page, "nextCursor"));
        if (next)
            snprintf(path, sizeof path, "/v1/images?limit=200&cursor=%s", next);
        json_decref(page);
        if (!next)
            break;
    }
    static const struct ctl_col cols[] = {{"id", "ID"},
                                          {"name", "NAME"},
                                          {"state", "STATE"},
                                          {"problemCode", "PROBLEM"},
                                          {"digest", "DIGEST"},
                                          {"layerCount", "LAYERS"},
                                          {"unpackedBytes", "BYTES"},
                                          {"appCount", "APPS"},
                                          {"source", "SOURCE"},
                                          {"createdAt", "CREATED"},
                                          {0}};
    if (ctl->json)
        ctl_print_json(rows, false);
    else
        ctl_print_table(ctl, rows, cols);
    json_decref(rows);
    return CTL_OK;
}

static int image_rm(struct ctl *ctl, const struct ctl_command *cmd, int argc, char **argv)
{
    const char *pos[1];
    int npos, rc, status = 0;
    char path[200], err[300], *body = NULL;
    if (ctl_parse(cmd, argc, argv, NULL, pos, 1, &npos, &rc) != 0)
        return rc;
    if (npos != 1)
        return ctl_usage_error(cmd, "rm takes an Image id or name");
    /* DELETE takes the id: a name is looked up first. */
    snprintf(path, sizeof path, "/v1/images/%.120s", pos[0]);
    if (ctl_http(ctl, "GET", path, &status, &body, err, sizeof err) != 0) {
        fprintf(stderr, "sbxctl image rm: %s\n", err);
        return CTL_ERROR;
    }
    json_t *im = status == 200 ? json_loads(body, 0, NULL) : NULL;
    if (!im) {
        rc = report_problem("rm", status, body);
        free(body);
        return rc;
    }
    free(body);
    body = NULL;
    snprintf(path, sizeof path, "/v1/images/%s", json_string_value(json_object_get(im, "id")));
    json_decref(im);
    if (ctl_http(ctl, "DELETE", path, &status, &body, err, sizeof err) != 0) {
        fprintf(stderr, "sbxctl image rm: %s\n", err);
        return CTL_ERROR;
    }
    rc = status == 204 ? CTL_OK : report_problem("rm", status, body);
    if (rc == CTL_OK && !ctl->json)
        printf("deleted %s\n", pos[0]);
    free(body);
    return rc;
}

int cmd_image(struct ctl *ctl, int argc, char **argv)
{
    const struct ctl_command *cmd = ctl_find_command("image");
    if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        ctl_command_help(cmd, argc < 1 ? stderr : stdout);
        return argc < 1 ? CTL_USAGE : CTL_OK;
    }
    if (!ctl->cfg.admin_token[0]) {
        fprintf(stderr, "sbxctl image: set SBX_ADMIN_TOKEN (or admin_token in the config file) "
                        "to the admin token\n");
        return CTL_USAGE;
    }
    const char *sub = argv[0];
    if (strcmp(sub, "push") == 0)
        return image_push(ctl, cmd, argc - 1, argv + 1);
    if (strcmp(sub, "pull") == 0)
        return image_pull(ctl, cmd, argc - 1, argv + 1);
    if (strcmp(sub, "ls") == 0)
        return image_ls(ctl, cmd, argc - 1, argv + 1);
    if (strcmp(sub, "rm") == 0)
        return image_rm(ctl, cmd, argc - 1, argv + 1);
    return ctl_usage_error(cmd, "unknown image command \"%s\"", sub);
}

/*
 * import_jobs.c: claim an importing Image, import it on a job thread, record ready or failed
 * (import_jobs.h); and, with nothing to claim, fetch into this host's cache the pulled images that
 * Apps run and this host lacks (another host imported them), by their manifest digest.
 *
 * Hidden state: w->image_job_running while a job is queued or running (one at a time per worker,
 * so that imports never take all of the job threads that boot Sandboxes), and the digests whose
 * fetch failed lately (retried after FETCH_RETRY_MS).
 */
#include "import_jobs.h"
#include "store_images.h"
#include "images/image_cache.h"
#include "images/importer.h"
#include "images/registry_pull.h"
#include "log.h"
#include "sandbox/jobs.h"
#include "clock.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FETCH_RETRY_MS 60000
#define FETCH_FAILED_MAX 16

static struct {
    char digest[STORE_DIGEST_LEN];
    int64_t at;
} fetch_failed[FETCH_FAILED_MAX];

struct import_job {
    struct worker *w;
    bool fetch; /* a fetch of digest for this host's cache, not an Image's import */
    char digest[STORE_DIGEST_LEN];
    struct sbx_config cfg; /* a copy: the job thread reads no worker state */
    struct store_image im; /* as claimed, with the credentials of a pull */
    struct import_result res;
    int rc;
};

static void import_work(void *arg)
{
    struct import_job *j = arg;
    if (strcmp(j->im.source, "upload") == 0) {
        if (!j->im.upload_path[0])
            j->rc = image_fail(&j->res.problem, IMAGE_IO_ERROR,
                               "the uploaded archive is gone (deleted, or its import ended)");
        else
            j->rc = import_archive(&j->cfg, j->im.id, j->im.upload_path, &j->res);
    } else {
        j->rc = registry_pull(&j->cfg, j->im.id, j->im.source, j->im.credentials_json, &j->res);
    }
}

static bool fetch_failed_lately(const char *digest)
{
    for (size_t i = 0; i < FETCH_FAILED_MAX; i++)
        if (strcmp(fetch_failed[i].digest, digest) == 0 &&
            clock_mono_ms() - fetch_failed[i].at < FETCH_RETRY_MS)
            return true;
    return false;
}

static void fetch_done(struct import_job *j)
{
    if (j->rc == 0 && strcmp(j->res.digest, j->digest) == 0) {
        log_info("images: fetched %s into this host's cache from %s", j->digest, j->im.source);
        return;
    }
    log_warn("images: cannot fetch %s from %s: %s: %s", j->digest, j->im.source,
             j->rc == 0 ? IMAGE_DIGEST_MISMATCH : j->res.problem.code,
             j->rc == 0 ? "the registry's image has another config digest" : j->res.problem.detail);
    size_t oldest = 0;
    for (size_t i = 0; i < FETCH_FAILED_MAX; i++)
        if (fetch_failed[i].at < fetch_failed[oldest].at)
            oldest = i;
    snprintf(fetch_failed[oldest].digest, sizeof fetch_failed[oldest].digest, "%s", j->digest);
    fetch_failed[oldest].at = clock_mono_ms();
}

static void import_done(void *arg)
{
    struct import_job *j = arg;
    struct worker *w = j->w;
    struct store_image_result r = {0};

    if (j->fetch) {
        fetch_done(j);
        goto out;
    }

    r.ok = j->rc == 0;
    if (r.ok) {
        r.digest = j->res.digest;
        r.layer_count = j->res.layer_count;
        r.unpacked_bytes = j->res.unpacked_bytes;
        r.entrypoint_json = j->res.entrypoint_json;
        r.cmd_json = j->res.cmd_json;
        r.env_json = j->res.env_json;
        r.working_dir = j->res.working_dir;
        r.user = j->res.user;
        r.manifest_digest = j->res.manifest_digest[0] ? j->res.manifest_digest : NULL;
        log_info("images: %s (%s) imported as %s: %lld layers, %lld bytes%s (blobs %lld ms, "
                 "layers %lld ms; %lld extended attributes kept, %lld left out)",
                 j->im.id, j->im.name, j->res.digest, (long long)j->res.layer_count,
                 (long long)j->res.unpacked_bytes, j->res.reused ? ", already cached" : "",
                 (long long)j->res.stage_ms, (long long)j->res.apply_ms, (long long)j->res.xattrs,
                 (long long)j->res.xattrs_dropped);
    } else {
        r.problem_code = j->res.problem.code ? j->res.problem.code : IMAGE_IO_ERROR;
        r.problem_detail = j->res.problem.detail;
        log_warn("images: %s (%s) failed: %s: %s", j->im.id, j->im.name, r.problem_code,
                 r.problem_detail);
    }
    enum store_status s = store_image_finish_import(w->st, &w->ctx, j->im.id, w->id, &r);
    if (s == STORE_CONFLICT)
        log_info("images: %s was deleted or taken over during its import", j->im.id);
    else if (s != STORE_OK)
        log_warn("images: cannot record the import of %s: %s", j->im.id, store_status_name(s));
    /* The archive was only the import's input; once recorded (or the Image deleted) it goes. */
    if (s != STORE_BUSY && s != STORE_ERROR && j->im.upload_path[0])
        unlink(j->im.upload_path);
out:
    import_result_clear(&j->res);
    store_image_clear(&j->im);
    free(j);
    w->image_job_running = false;
    images_poll(w);
}

/* A pulled image an App runs that this host lacks: fetch it by its manifest digest (anonymously:
 * a pull's credentials are kept only for the pull itself). Returns true when a job started. */
static bool fetch_missing(struct worker *w)
{
    char source[512], manifest[STORE_DIGEST_LEN];
    struct registry_ref ref;
    for (size_t i = 0; i < w->n_shapes; i++) {
        const char *digest = w->shapes[i].image;
        if (image_is_default(digest) || image_cache_ready(&w->cfg, digest) ||
            fetch_failed_lately(digest))
            continue;
        if (store_image_pull_source(w->st, digest, source, sizeof source, manifest,
                                    sizeof manifest) != STORE_OK ||
            registry_ref_parse(source, &ref) != 0)
            continue;
        struct import_job *j = calloc(1, sizeof *j);
        if (!j)
            return false;
        j->w = w;
        j->cfg = w->cfg;
        j->fetch = true;
        snprintf(j->digest, sizeof j->digest, "%s", digest);
        snprintf(j->im.id, sizeof j->im.id, "fetch-%.16s", digest + 7);
        snprintf(j->im.source, sizeof j->im.source, "%s/%s@%s", ref.host, ref.repo, manifest);
        log_info("images: fetching %s (an App runs it, this host lacks it) from %s", digest,
                 j->im.source);
        w->image_job_running = true;
        if (jobs_submit(w->jobs, import_work, import_done, j) != 0) {
            w->image_job_running = false;
            free(j);
            return false;
        }
        return true;
    }
    return false;
}

void images_poll(struct worker *w)
{
    if (w->image_job_running || w->stopping)
        return;
    struct import_job *j = calloc(1, sizeof *j);
    if (!j)
        return;
    enum store_status s =
        store_image_claim_import(w->st, &w->ctx, w->id, w->cfg.worker_stale_ms, &j->im);
    if (s != STORE_OK) {
        if (s != STORE_EMPTY)
            log_warn("images: cannot claim an import: %s", store_status_name(s));
        free(j);
        if (s == STORE_EMPTY)
            (void)fetch_missing(w);
        return;
    }
    j->w = w;
    j->cfg = w->cfg;
    log_info("images: importing %s (%s) from %s", j->im.id, j->im.name, j->im.source);
    w->image_job_running = true;
    if (jobs_submit(w->jobs, import_work, import_done, j) != 0) {
        /* Out of memory: the claim goes stale and is taken over later. */
        w->image_job_running = false;
        store_image_clear(&j->im);
        free(j);
    }
}

/*
 * test_image_import.c: the importer (worker/images/importer.h) on archives written here with
 * libarchive: docker-archives and OCI layouts that apply whiteouts, opaque directories, modes,
 * owners, symlinks and hard links, and every bad input of an import, each of which must end with
 * its problem code and leave everything outside the image's work and cache directories as it
 * was (a sentinel tree next to the data directory, and the host paths an escape would write).
 *
 * Runs as root (owners are kept only then), in a temporary directory of its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "images/image_cache.h"
#include "images/image_digest.h"
#include "images/importer.h"
#include "images/registry_pull.h"
#include "../../agent/image_user.h"

#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

static char base[256], data_dir[300], sentinel[300], escape_name[64];

/* One entry of a tar written by write_tar. */
struct ent {
    const char *name;
    char type;        /* 'f' file, 'd' dir, 'l' symlink, 'h' hard link, 'c' char device, 'p' FIFO */
    const char *data; /* file content, or the link target */
    int mode, uid, gid;
};

/* Extended attributes write_tar gives the entries of these names, in any tar. */
static const struct {
    const char *entry, *name, *value;
} tar_xattrs[] = {
    {"home/u/owned", "user.origin", "layer two"},
    {"home/u/", "user.dir", "d"},
    {"home/u/trusted", "trusted.sbx", "dropped"},
};

static void write_tar(const char *path, const struct ent *ents, size_t n, bool gzip)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (gzip)
        archive_write_add_filter_gzip(a);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, ents[i].name);
        archive_entry_set_uid(e, ents[i].uid);
        archive_entry_set_gid(e, ents[i].gid);
        archive_entry_set_mtime(e, 1700000000, 0);
        size_t len = 0;
        switch (ents[i].type) {
        case 'f':
            archive_entry_set_filetype(e, AE_IFREG);
            len = strlen(ents[i].data);
            archive_entry_set_size(e, (la_int64_t)len);
            break;
        case 'd':
            archive_entry_set_filetype(e, AE_IFDIR);
            break;
        case 'l':
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, ents[i].data);
            break;
        case 'h':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_hardlink(e, ents[i].data);
            break;
        case 'c':
            archive_entry_set_filetype(e, AE_IFCHR);
            archive_entry_set_rdev(e, makedev(1, 3));
            break;
        case 'p':
            archive_entry_set_filetype(e, AE_IFIFO);
            break;
        }
        archive_entry_set_perm(e, ents[i].mode ? (mode_t)ents[i].mode : 0644);
        for (size_t x = 0; x < sizeof tar_xattrs / sizeof tar_xattrs[0]; x++)
            if (strcmp(tar_xattrs[x].entry, ents[i].name) == 0)
                archive_entry_xattr_add_entry(e, tar_xattrs[x].name, tar_xattrs[x].value,
                                              strlen(tar_xattrs[x].value));
        if (strcmp(ents[i].name, "./bin/agent") == 0) {
            /* File capabilities (v2: CAP_NET_RAW permitted and effective), as ping has. */
            static const unsigned char cap[20] = {0x01, 0, 0, 0x02, 0, 0x20};
            archive_entry_xattr_add_entry(e, "security.capability", cap, sizeof cap);
        }
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        if (len)
            assert_int_equal(archive_write_data(a, ents[i].data, len), (la_ssize_t)len);
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* A file's bytes (at most 1 MiB), NUL-terminated. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static void put_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

/* The digest of a layer's decompressed bytes (its diff id). */
static void diff_id_of(const char *layer, char out[IMAGE_DIGEST_LEN])
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    struct image_hasher h;
    const void *buf;
    size_t len;
    la_int64_t off;
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    assert_int_equal(archive_read_open_filename(a, layer, 1 << 16), ARCHIVE_OK);
    assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_OK);
    image_hasher_init(&h);
    while (archive_read_data_block(a, &buf, &len, &off) == ARCHIVE_OK)
        image_hasher_update(&h, buf, len);
    image_hasher_final(&h, out);
    archive_read_free(a);
}

/* Writes a docker-archive of the given layers (paths of layer tars) to out; returns the config
 * digest. bad_diff: the first diff id is wrong. missing: the layers are stored under a name
 * that the manifest does not give. stored (NULL: layers): the layer files the archive holds,
 * in place of those the config's diff ids describe. */
static void docker_archive_of(const char *out, const char *const *layers, const char *const *stored,
                              size_t n, bool bad_diff, bool missing, char digest[IMAGE_DIGEST_LEN])
{
    char config[4096], manifest[4096], diff[IMAGE_DIGEST_LEN], names[8][96], path[512];
    size_t cn = (size_t)snprintf(config, sizeof config,
                                 "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
                                 "\"Env\":[\"A=1\"],\"Cmd\":[\"/bin/agent\"],\"WorkingDir\":"
                                 "\"/w\",\"User\":\"7:7\"},\"rootfs\":{\"type\":\"layers\","
                                 "\"diff_ids\":[");
    size_t mn = (size_t)snprintf(manifest, sizeof manifest, "[{\"Config\":\"CONFIG\",\"Layers\":[");
    for (size_t i = 0; i < n; i++) {
        diff_id_of(layers[i], diff);
        if (bad_diff && i == 0)
            diff[10] = diff[10] == '0' ? '1' : '0';
        cn += (size_t)snprintf(config + cn, sizeof config - cn, "%s\"%s\"", i ? "," : "", diff);
        snprintf(names[i], sizeof names[i], "%.64s/layer.tar", diff + 7);
        mn += (size_t)snprintf(manifest + mn, sizeof manifest - mn, "%s\"%s\"", i ? "," : "",
                               names[i]);
    }
    snprintf(config + cn, sizeof config - cn, "]}}");
    snprintf(manifest + mn, sizeof manifest - mn, "]}]");
    struct image_hasher h;
    image_hasher_init(&h);
    image_hasher_update(&h, config, strlen(config));
    image_hasher_final(&h, digest);
    char config_name[80], manifest_final[4200];
    snprintf(config_name, sizeof config_name, "%s.json", digest + 7);
    char *at = strstr(manifest, "CONFIG");
    snprintf(manifest_final, sizeof manifest_final, "%.*s%s%s", (int)(at - manifest), manifest,
             config_name, at + 6);

    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_filename(a, out), ARCHIVE_OK);
    for (size_t i = 0; i < n + 2; i++) {
        /* missing: the layer is there, but not under the name the manifest gives. */
        const char *name = i == 0    ? "manifest.json"
                           : i == 1  ? config_name
                           : missing ? "misplaced/layer.tar"
                                     : names[i - 2];
        size_t len;
        char *bytes = NULL;
        const char *content = i == 0 ? manifest_final : i == 1 ? config : NULL;
        if (!content) {
            bytes = slurp((stored ? stored : layers)[i - 2], &len);
            content = bytes;
        } else {
            len = strlen(content);
        }
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)len);
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        assert_int_equal(archive_write_data(a, content, len), (la_ssize_t)len);
        archive_entry_free(e);
        free(bytes);
    }
    (void)path;
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static void docker_archive(const char *out, const char *const *layers, size_t n, bool bad_diff,
                           bool missing, char digest[IMAGE_DIGEST_LEN])
{
    docker_archive_of(out, layers, NULL, n, bad_diff, missing, digest);
}

static struct sbx_config cfg;

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/sbx-test-image-import-%d", (int)getpid());
    snprintf(data_dir, sizeof data_dir, "%s/data", base);
    snprintf(sentinel, sizeof sentinel, "%s/sentinel", base);
    snprintf(escape_name, sizeof escape_name, "sbx-image-escape-%d", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s %s && echo keep > %s/file", base, data_dir,
             sentinel, sentinel);
    assert_int_equal(system(cmd), 0);
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    cfg.image_upload_limit = 1 << 30;
    cfg.image_unpacked_limit = 1 << 30;
    cfg.image_entries_limit = 1000000;
    cfg.registry_pull_timeout = 3600;
    cfg.registry_low_speed_limit = 1024;
    cfg.registry_low_speed_time = 60;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s /tmp/%s", base, escape_name);
    return system(cmd) == 0 ? 0 : -1;
}

/* After a failed import: the sentinel is as it was, nothing escaped to the host's /tmp, the
 * work directory is gone and the cache holds no image. */
static void assert_untouched(void)
{
    char path[600], *content;
    snprintf(path, sizeof path, "%s/file", sentinel);
    content = slurp(path, NULL);
    assert_string_equal(content, "keep\n");
    free(content);
    DIR *d = opendir(sentinel);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += de->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 1);
    snprintf(path, sizeof path, "/tmp/%s", escape_name);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/images/tmp/img_test", data_dir);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/images/sha256", data_dir);
    d = opendir(path);
    n = 0;
    if (d) {
        for (struct dirent *de; (de = readdir(d)) != NULL;)
            n += de->d_name[0] != '.';
        closedir(d);
    }
    assert_int_equal(n, 0);
}

static void expect_failure(const char *archive, const char *code)
{
    struct import_result res = {0};
    assert_int_equal(import_archive(&cfg, "img_test", archive, &res), -1);
    if (!res.problem.code || strcmp(res.problem.code, code) != 0)
        fail_msg("expected %s, got %s: %s", code, res.problem.code ? res.problem.code : "(none)",
                 res.problem.detail);
    assert_true(res.problem.detail[0] != '\0');
    import_result_clear(&res);
    assert_untouched();
}

static void layer_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", base, name);
}

static void test_docker_archive_applies_layers(void **state)
{
    (void)state;
    char l1[400], l2[400], ar[400], digest[IMAGE_DIGEST_LEN], dir[4096], err[200], p[4400];
    struct ent one[] = {
        {"./", 'd', NULL, 0755, 0, 0},
        {"./etc/", 'd', NULL, 0755, 0, 0},
        {"./etc/issue.net", 'f', "gone\n", 0644, 0, 0},
        {"./etc/keep", 'f', "kept\n", 0600, 0, 0},
        {"./opq/", 'd', NULL, 0755, 0, 0},
        {"./opq/old", 'f', "old\n", 0644, 0, 0},
        {"./dev/", 'd', NULL, 0755, 0, 0},
        {"./dev/null", 'c', NULL, 0666, 0, 0},
        {"./bin/", 'd', NULL, 0755, 0, 0},
        {"./bin/agent", 'f', "#!/bin/sh\n", 04755, 0, 0},
        {"./bin/sg", 'f', "#!/bin/sh\n", 02755, 0, 0},
        {"./srv/", 'd', NULL, 02775, 0, 0},
    };
    struct ent two[] = {
        {"etc/", 'd', NULL, 0755, 0, 0},
        {"etc/.wh.issue.net", 'f', "", 0644, 0, 0},
        {"opq/new", 'f', "new\n", 0644, 0, 0},
        {"opq/.wh..wh..opq", 'f', "", 0644, 0, 0},
        {"home/u/owned", 'f', "mine\n", 0640, 1234, 4321},
        {"home/u/", 'd', NULL, 0755, 0, 0},
        {"home/u/trusted", 'f', "t\n", 0644, 0, 0},
        {"bin/link", 'l', "agent", 0777, 0, 0},
        {"bin/hard", 'h', "bin/agent", 0, 0, 0},
    };
    layer_path(l1, sizeof l1, "l1.tar");
    layer_path(l2, sizeof l2, "l2.tar.gz");
    layer_path(ar, sizeof ar, "image.tar");
    write_tar(l1, one, sizeof one / sizeof one[0], false);
    write_tar(l2, two, sizeof two / sizeof two[0], true);
    const char *layers[] = {l1, l2};
    docker_archive(ar, layers, 2, false, false, digest);

    struct import_result res = {0};
    if (import_archive(&cfg, "img_test", ar, &res) != 0)
        fail_msg("import failed: %s: %s", res.problem.code, res.problem.detail);
    assert_string_equal(res.digest, digest);
    assert_int_equal(res.layer_count, 2);
    assert_false(res.reused);
    assert_string_equal(res.cmd_json, "[\"/bin/agent\"]");
    assert_string_equal(res.env_json, "[\"A=1\"]");
    assert_string_equal(res.working_dir, "/w");
    assert_string_equal(res.user, "7:7");
    assert_null(res.entrypoint_json);
    import_result_clear(&res);

    assert_true(image_cache_ready(&cfg, digest));
    assert_int_equal(image_cache_dir(&cfg, digest, dir, sizeof dir, err, sizeof err), 0);
    struct stat sb;
    snprintf(p, sizeof p, "%s/rootfs/etc/issue.net", dir);
    assert_int_equal(lstat(p, &sb), -1); /* whiteout */
    snprintf(p, sizeof p, "%s/rootfs/etc/keep", dir);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);
    snprintf(p, sizeof p, "%s/rootfs/opq/old", dir);
    assert_int_equal(lstat(p, &sb), -1); /* opaque directory: the lower layer's file is gone */
    snprintf(p, sizeof p, "%s/rootfs/opq/new", dir);
    assert_int_equal(lstat(p, &sb), 0); /* ... and this layer's stays */
    snprintf(p, sizeof p, "%s/rootfs/dev/null", dir);
    assert_int_equal(lstat(p, &sb), -1); /* device nodes are dropped */
    snprintf(p, sizeof p, "%s/rootfs/home/u/owned", dir);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0640);
    assert_int_equal(sb.st_uid, 1234);
    assert_int_equal(sb.st_gid, 4321);
    char xv[64] = "";
    /* user.* is kept on files and directories (after the chown), trusted.* is not */
    assert_int_equal(lgetxattr(p, "user.origin", xv, sizeof xv - 1), 9);
    assert_string_equal(xv, "layer two");
    snprintf(p, sizeof p, "%s/rootfs/home/u", dir);
    memset(xv, 0, sizeof xv);
    assert_int_equal(lgetxattr(p, "user.dir", xv, sizeof xv - 1), 1);
    snprintf(p, sizeof p, "%s/rootfs/home/u/trusted", dir);
    assert_int_equal(lgetxattr(p, "trusted.sbx", xv, sizeof xv), -1);
    /* No privilege from an image: a setuid-root file loses the bit and its file capabilities, a
     * setgid file its bit; a setgid directory keeps it (it only sets new files' group). */
    snprintf(p, sizeof p, "%s/rootfs/bin/agent", dir);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_uid, 0);
    assert_int_equal(sb.st_mode & 07777, 0755);
    assert_int_equal(sb.st_nlink, 2); /* bin/hard */
    assert_int_equal(lgetxattr(p, "security.capability", xv, sizeof xv), -1);
    assert_int_equal(errno, ENODATA);
    snprintf(p, sizeof p, "%s/rootfs/bin/sg", dir);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0755);
    snprintf(p, sizeof p, "%s/rootfs/srv", dir);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 02775);
    snprintf(p, sizeof p, "%s/rootfs/bin/link", dir);
    char target[IMAGE_DIGEST_LEN] = "";
    assert_int_equal(readlink(p, target, sizeof target - 1), 5);
    assert_string_equal(target, "agent");
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_equal(image_digest_file(p, target, NULL), 0);
    assert_string_equal(target, digest); /* the config blob, byte for byte */

    /* The same image again: the cache is reused, nothing unpacked. */
    memset(&res, 0, sizeof res);
    assert_int_equal(import_archive(&cfg, "img_test2", ar, &res), 0);
    assert_true(res.reused);
    assert_string_equal(res.digest, digest);
    assert_true(res.unpacked_bytes > 0);
    import_result_clear(&res);
    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf %s/images", data_dir);
    assert_int_equal(system(cmd), 0);
}

/* An OCI layout whose layer blob is `layer` (verified by digest) and whose config's diff id is
 * that of diff_layer (NULL: layer); tamper: the blob's bytes are not those of its name. */
static void oci_archive_of(const char *out, const char *layer, const char *diff_layer, bool tamper,
                           bool gzip_outer)
{
    char ld[IMAGE_DIGEST_LEN], cd[IMAGE_DIGEST_LEN], md[IMAGE_DIGEST_LEN], dd[IMAGE_DIGEST_LEN];
    char config[1024], manifest[1024], index[512], names[4][96];
    int64_t lsize;
    struct image_hasher h;
    assert_int_equal(image_digest_file(layer, ld, &lsize), 0);
    diff_id_of(diff_layer ? diff_layer : layer, dd);
    snprintf(config, sizeof config,
             "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":"
             "[\"/e\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}",
             dd);
    image_hasher_init(&h);
    image_hasher_update(&h, config, strlen(config));
    image_hasher_final(&h, cd);
    snprintf(manifest, sizeof manifest,
             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
             "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":"
             "\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%lld}]}",
             cd, strlen(config), ld, (long long)lsize);
    image_hasher_init(&h);
    image_hasher_update(&h, manifest, strlen(manifest));
    image_hasher_final(&h, md);
    snprintf(index, sizeof index,
             "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":"
             "\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\",\"size\":%zu}]}",
             md, strlen(manifest));
    snprintf(names[0], sizeof names[0], "index.json");
    snprintf(names[1], sizeof names[1], "blobs/sha256/%s", md + 7);
    snprintf(names[2], sizeof names[2], "blobs/sha256/%s", cd + 7);
    snprintf(names[3], sizeof names[3], "blobs/sha256/%s", ld + 7);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (gzip_outer)
        archive_write_add_filter_gzip(a);
    assert_int_equal(archive_write_open_filename(a, out), ARCHIVE_OK);
    for (int i = 0; i < 4; i++) {
        size_t len;
        char *bytes = i == 3 ? slurp(layer, &len) : NULL;
        const char *content = i == 0 ? index : i == 1 ? manifest : i == 2 ? config : bytes;
        if (i < 3)
            len = strlen(content);
        if (tamper && i == 3)
            bytes[len - 1] ^= 1;
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, names[i]);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)len);
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        assert_int_equal(archive_write_data(a, content, len), (la_ssize_t)len);
        archive_entry_free(e);
        free(bytes);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static void oci_archive(const char *out, const char *layer, bool tamper, bool gzip_outer)
{
    oci_archive_of(out, layer, NULL, tamper, gzip_outer);
}

static void test_oci_layout_gzip(void **state)
{
    (void)state;
    char l[400], ar[400];
    struct ent one[] = {{"a/b", 'f', "x\n", 0755, 0, 0}};
    layer_path(l, sizeof l, "oci-layer.tar.gz");
    layer_path(ar, sizeof ar, "oci.tar.gz");
    write_tar(l, one, 1, true);
    oci_archive(ar, l, false, true);
    struct import_result res = {0};
    if (import_archive(&cfg, "img_test", ar, &res) != 0)
        fail_msg("import failed: %s: %s", res.problem.code, res.problem.detail);
    assert_string_equal(res.entrypoint_json, "[\"/e\"]");
    assert_int_equal(res.layer_count, 1);
    assert_true(image_cache_ready(&cfg, res.digest));
    import_result_clear(&res);
    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf %s/images", data_dir);
    assert_int_equal(system(cmd), 0);
}

static void test_not_a_tar(void **state)
{
    (void)state;
    char ar[400];
    layer_path(ar, sizeof ar, "junk");
    put_file(ar, "this is not an archive at all, just some text that goes on for a while\n");
    expect_failure(ar, "image_not_archive");
}

static void test_truncated(void **state)
{
    (void)state;
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    static char big[200000];
    memset(big, 'z', sizeof big - 1);
    struct ent one[] = {{"big", 'f', big, 0644, 0, 0}};
    layer_path(l1, sizeof l1, "big.tar");
    layer_path(ar, sizeof ar, "trunc.tar");
    write_tar(l1, one, 1, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, false, digest);
    struct stat sb;
    assert_int_equal(stat(ar, &sb), 0);
    assert_int_equal(truncate(ar, sb.st_size / 2), 0);
    expect_failure(ar, "image_truncated");
}

static void test_missing_layer(void **state)
{
    (void)state;
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    struct ent one[] = {{"a", 'f', "a\n", 0644, 0, 0}};
    layer_path(l1, sizeof l1, "m.tar");
    layer_path(ar, sizeof ar, "missing.tar");
    write_tar(l1, one, 1, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, true, digest);
    expect_failure(ar, "image_layer_missing");
}

static void test_oci_tampered_blob(void **state)
{
    (void)state;
    char l[400], ar[400];
    struct ent one[] = {{"a", 'f', "abcdef\n", 0644, 0, 0}};
    layer_path(l, sizeof l, "t.tar");
    layer_path(ar, sizeof ar, "tampered.tar");
    write_tar(l, one, 1, false);
    oci_archive(ar, l, true, false);
    expect_failure(ar, "image_digest_mismatch");
}

static void test_docker_wrong_diff_id(void **state)
{
    (void)state;
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    struct ent one[] = {{"a", 'f', "a\n", 0644, 0, 0}};
    layer_path(l1, sizeof l1, "d.tar");
    layer_path(ar, sizeof ar, "baddiff.tar");
    write_tar(l1, one, 1, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, true, false, digest);
    expect_failure(ar, "image_digest_mismatch");
}

static void escape_case(const struct ent *one, size_t n1, const struct ent *two, size_t n2)
{
    char l1[400], l2[400], ar[400], digest[IMAGE_DIGEST_LEN];
    layer_path(l1, sizeof l1, "e1.tar");
    layer_path(l2, sizeof l2, "e2.tar");
    layer_path(ar, sizeof ar, "escape.tar");
    write_tar(l1, one, n1, false);
    const char *layers[] = {l1, l2};
    if (two)
        write_tar(l2, two, n2, false);
    docker_archive(ar, layers, two ? 2 : 1, false, false, digest);
    expect_failure(ar, "image_path_escape");
}

static void test_dotdot_and_absolute_names(void **state)
{
    (void)state;
    char up[400], abs_name[400];
    snprintf(up, sizeof up, "../../../../../../../../tmp/%s", escape_name);
    snprintf(abs_name, sizeof abs_name, "/tmp/%s", escape_name);
    struct ent dotdot[] = {{up, 'f', "escaped\n", 0644, 0, 0}};
    escape_case(dotdot, 1, NULL, 0);
    struct ent absolute[] = {{abs_name, 'f', "escaped\n", 0644, 0, 0}};
    escape_case(absolute, 1, NULL, 0);
}

static void test_symlink_escape_across_layers(void **state)
{
    (void)state;
    char into[400], rel_target[400];
    /* Layer 1 makes a -> /, layer 2 writes a/tmp/<name>: the host's /tmp if followed. */
    snprintf(into, sizeof into, "a/tmp/%s", escape_name);
    struct ent one[] = {{"a", 'l', "/", 0777, 0, 0}};
    struct ent two[] = {{into, 'f', "escaped\n", 0644, 0, 0}};
    escape_case(one, 1, two, 1);
    /* The same through a relative link that climbs out: b -> ../../../../sentinel. */
    snprintf(rel_target, sizeof rel_target, "../../../../../../../../%s", sentinel + 1);
    struct ent one_rel[] = {{"b", 'l', rel_target, 0777, 0, 0}};
    struct ent two_rel[] = {{"b/file", 'f', "overwritten\n", 0644, 0, 0}};
    escape_case(one_rel, 1, two_rel, 1);
}

static void test_hard_link_outside(void **state)
{
    (void)state;
    char target[400];
    snprintf(target, sizeof target, "../../../../../../../..%s/file", sentinel);
    struct ent up[] = {{"h", 'h', target, 0, 0, 0}};
    escape_case(up, 1, NULL, 0);
    struct ent absolute[] = {{"h", 'h', "/etc/passwd", 0, 0, 0}};
    escape_case(absolute, 1, NULL, 0);
    /* Through a symlinked directory of a lower layer: s -> /etc, then h => s/passwd. */
    struct ent one[] = {{"s", 'l', "/etc", 0777, 0, 0}};
    struct ent two[] = {{"h", 'h', "s/passwd", 0, 0, 0}};
    escape_case(one, 1, two, 1);
}

/* The cache and the warm pool know an image by its config digest: an archive that carries a
 * genuine image's config with other layers must not import under that digest, from either
 * layout, whether or not the genuine image is cached already. */
static void test_forged_layers_refused(void **state)
{
    (void)state;
    char good[400], evil[400], ar[400], digest[IMAGE_DIGEST_LEN], forged_digest[IMAGE_DIGEST_LEN];
    char dir[4096], err[200], p[4400];
    struct ent good_ents[] = {{"etc/motd", 'f', "genuine\n", 0644, 0, 0}};
    struct ent evil_ents[] = {{"etc/motd", 'f', "forged!\n", 0644, 0, 0}};
    layer_path(good, sizeof good, "good.tar.gz");
    layer_path(evil, sizeof evil, "evil.tar.gz");
    write_tar(good, good_ents, 1, true);
    write_tar(evil, evil_ents, 1, true);
    const char *genuine[] = {good}, *forged[] = {evil};

    layer_path(ar, sizeof ar, "forged-oci.tar");
    oci_archive_of(ar, evil, good, false, false);
    expect_failure(ar, "image_digest_mismatch");
    layer_path(ar, sizeof ar, "forged-docker.tar");
    docker_archive_of(ar, genuine, forged, 1, false, false, forged_digest);
    expect_failure(ar, "image_digest_mismatch");

    /* The genuine image imports, under the digest the forgery claimed. */
    layer_path(ar, sizeof ar, "genuine-docker.tar");
    docker_archive(ar, genuine, 1, false, false, digest);
    assert_string_equal(digest, forged_digest);
    struct import_result res = {0};
    if (import_archive(&cfg, "img_test", ar, &res) != 0)
        fail_msg("import failed: %s: %s", res.problem.code, res.problem.detail);
    assert_string_equal(res.digest, digest);
    import_result_clear(&res);

    /* With it cached, the forgery is still refused rather than handed the cached tree. */
    layer_path(ar, sizeof ar, "forged-docker.tar");
    memset(&res, 0, sizeof res);
    assert_int_equal(import_archive(&cfg, "img_test", ar, &res), -1);
    assert_non_null(res.problem.code);
    assert_string_equal(res.problem.code, "image_digest_mismatch");
    import_result_clear(&res);
    assert_int_equal(image_cache_dir(&cfg, digest, dir, sizeof dir, err, sizeof err), 0);
    snprintf(p, sizeof p, "%s/rootfs/etc/motd", dir);
    char *motd = slurp(p, NULL);
    assert_string_equal(motd, "genuine\n");
    free(motd);
    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf %s/images", data_dir);
    assert_int_equal(system(cmd), 0);
}

/* An image's /etc/passwd that is a FIFO: the import leaves it out (as it does sockets and
 * devices), and the user lookup the worker makes on the host tree never waits on one (a cache
 * unpacked before FIFOs were dropped may hold one): it finds no passwd, at once. */
static void test_fifo_passwd_never_blocks(void **state)
{
    (void)state;
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN], dir[4096], err[200], p[4400], why[256];
    struct ent one[] = {{"etc/", 'd', NULL, 0755, 0, 0},
                        {"etc/passwd", 'p', NULL, 0644, 0, 0},
                        {"etc/group", 'f', "root:x:0:\n", 0644, 0, 0}};
    layer_path(l1, sizeof l1, "fifo.tar");
    layer_path(ar, sizeof ar, "fifo-image.tar");
    write_tar(l1, one, 3, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, false, digest);
    struct import_result res = {0};
    if (import_archive(&cfg, "img_test", ar, &res) != 0)
        fail_msg("import failed: %s: %s", res.problem.code, res.problem.detail);
    import_result_clear(&res);
    assert_int_equal(image_cache_dir(&cfg, digest, dir, sizeof dir, err, sizeof err), 0);
    struct stat sb;
    snprintf(p, sizeof p, "%s/rootfs/etc/passwd", dir);
    assert_int_equal(lstat(p, &sb), -1);
    assert_int_equal(errno, ENOENT);

    /* A blocked open would end the test here (SIGALRM) instead of hanging it. */
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/rootfs", dir);
    int root = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(root >= 0);
    struct image_user u;
    alarm(60);
    assert_int_equal(image_user_resolve("app", root, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "not in the image's /etc/passwd"));
    assert_int_equal(image_user_resolve("0", root, &u, why, sizeof why), 0);
    alarm(0);
    close(root);
    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf %s/images", data_dir);
    assert_int_equal(system(cmd), 0);
}

static void test_over_limits(void **state)
{
    (void)state;
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    static char big[300000];
    memset(big, 'q', sizeof big - 1);
    struct ent one[] = {{"big", 'f', big, 0644, 0, 0}};
    layer_path(l1, sizeof l1, "limit.tar");
    layer_path(ar, sizeof ar, "limit-image.tar");
    write_tar(l1, one, 1, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, false, digest);
    cfg.image_upload_limit = 100000;
    expect_failure(ar, "image_archive_too_large");
    cfg.image_upload_limit = 1 << 30;
    cfg.image_unpacked_limit = 100000;
    expect_failure(ar, "image_tree_too_large");
    cfg.image_unpacked_limit = 1 << 30;
}

/* A decompression bomb: a small gzip layer whose stream goes on with megabytes of zeros after
 * the tar's end (no file of it is large, so only the decompressed stream shows it). */
static void test_decompression_bomb(void **state)
{
    (void)state;
    char tarp[400], l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    struct ent one[] = {{"a", 'f', "a\n", 0644, 0, 0}};
    layer_path(tarp, sizeof tarp, "bomb-inner.tar");
    layer_path(l1, sizeof l1, "bomb.tar.gz");
    layer_path(ar, sizeof ar, "bomb-image.tar");
    write_tar(tarp, one, 1, false);
    size_t tlen;
    char *tar = slurp(tarp, &tlen);
    const size_t zeros = 32u << 20;
    struct archive *a = archive_write_new();
    archive_write_set_format_raw(a);
    archive_write_add_filter_gzip(a);
    assert_int_equal(archive_write_open_filename(a, l1), ARCHIVE_OK);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "layer");
    archive_entry_set_filetype(e, AE_IFREG);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    assert_int_equal(archive_write_data(a, tar, tlen), (la_ssize_t)tlen);
    char *z = calloc(1, 1 << 20);
    for (size_t i = 0; i < zeros >> 20; i++)
        assert_int_equal(archive_write_data(a, z, 1 << 20), 1 << 20);
    free(z);
    free(tar);
    archive_entry_free(e);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    struct stat sb;
    assert_int_equal(stat(l1, &sb), 0);
    assert_true(sb.st_size < (1 << 20)); /* small on disk */
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, false, digest);
    cfg.image_unpacked_limit = 1 << 20;
    expect_failure(ar, "image_tree_too_large");
    cfg.image_unpacked_limit = 1 << 30;
}

/* An entry-count bomb: a layer of many empty files, over a small image_entries_limit; and an
 * archive of many entries itself. */
static void test_entry_count_bomb(void **state)
{
    (void)state;
    enum { N = 300 };
    char l1[400], ar[400], digest[IMAGE_DIGEST_LEN];
    static char names[N][16];
    static struct ent many[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        many[i] = (struct ent){names[i], 'f', "", 0644, 0, 0};
    }
    layer_path(l1, sizeof l1, "many.tar");
    layer_path(ar, sizeof ar, "many-image.tar");
    write_tar(l1, many, N, false);
    const char *layers[] = {l1};
    docker_archive(ar, layers, 1, false, false, digest);
    cfg.image_entries_limit = 100;
    expect_failure(ar, "image_tree_too_large");
    /* The image archive's own entries count too. */
    cfg.image_entries_limit = 2;
    expect_failure(ar, "image_archive_too_large");
    cfg.image_entries_limit = 1000000;
}

/* A registry on loopback that answers every request with a 200 whose body comes one byte every
 * 100 ms, until the client goes or the test ends. */
struct trickler {
    int listen_fd;
    volatile int stop;
    pthread_t thread;
};

static void *trickle(void *arg)
{
    struct trickler *t = arg;
    while (!t->stop) {
        struct pollfd pfd = {.fd = t->listen_fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int c = accept(t->listen_fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[4096];
        size_t n = 0;
        ssize_t r;
        while (n < sizeof req - 1 && (r = read(c, req + n, sizeof req - 1 - n)) > 0) {
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        const char *head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json"
            "\r\nContent-Length: 100000\r\n\r\n";
        if (write(c, head, strlen(head)) < 0) {
            close(c);
            continue;
        }
        while (!t->stop && send(c, "{", 1, MSG_NOSIGNAL) == 1)
            usleep(100 * 1000);
        close(c);
    }
    return NULL;
}

static void trickler_start(struct trickler *t, char *host, size_t hostlen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    t->stop = 0;
    t->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(t->listen_fd >= 0);
    assert_int_equal(bind(t->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(t->listen_fd, 8), 0);
    assert_int_equal(getsockname(t->listen_fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(host, hostlen, "127.0.0.1:%d", ntohs(sa.sin_port));
    assert_int_equal(pthread_create(&t->thread, NULL, trickle, t), 0);
}

static void trickler_stop(struct trickler *t)
{
    t->stop = 1;
    pthread_join(t->thread, NULL);
    close(t->listen_fd);
}

static void expect_slow_pull(const char *host, const char *says)
{
    char ref[300];
    struct import_result res = {0};
    snprintf(ref, sizeof ref, "%s/sbx/slow:v1", host);
    assert_int_equal(registry_pull(&cfg, "img_test", ref, NULL, &res), -1);
    if (!res.problem.code || strcmp(res.problem.code, "registry_too_slow") != 0 ||
        !strstr(res.problem.detail, says))
        fail_msg("expected registry_too_slow (%s), got %s: %s", says,
                 res.problem.code ? res.problem.code : "(none)", res.problem.detail);
    import_result_clear(&res);
    assert_untouched();
}

/* A registry that sends a byte at a time fails the pull, by the minimum rate and, with that
 * lenient, by the pull's time limit; nothing is left behind. */
static void test_trickling_registry(void **state)
{
    (void)state;
    struct trickler t;
    char host[64];
    trickler_start(&t, host, sizeof host);
    snprintf(cfg.insecure_registries, sizeof cfg.insecure_registries, "%s", host);
    cfg.registry_pull_timeout = 600;
    cfg.registry_low_speed_limit = 1000;
    cfg.registry_low_speed_time = 1;
    expect_slow_pull(host, "registry_low_speed_limit");
    cfg.registry_low_speed_limit = 1;
    cfg.registry_low_speed_time = 600;
    cfg.registry_pull_timeout = 2;
    expect_slow_pull(host, "registry_pull_timeout");
    trickler_stop(&t);
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_image_import: needs root (owners); skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_docker_archive_applies_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oci_layout_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_tar, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_layer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oci_tampered_blob, setup, teardown),
        cmocka_unit_test_setup_teardown(test_docker_wrong_diff_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dotdot_and_absolute_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_escape_across_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_link_outside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_over_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_layers_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_passwd_never_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decompression_bomb, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_count_bomb, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trickling_registry, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

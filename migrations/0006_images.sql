-- 0006_images: Images, the userspaces Apps run on. An Image is imported from an uploaded archive
-- (docker-archive or OCI image layout) or pulled from a registry by a worker host, into the per-host
-- cache <data_dir>/images/sha256/<hex>/ named by its digest (the digest of its config blob). An
-- App names an Image (or 'default', the built-in rootfs) and records the digest it resolved to,
-- which is what its Sandboxes' shape (and the warm pool) carries.
CREATE TABLE images (
    id             TEXT PRIMARY KEY,         -- img_...
    name           TEXT NOT NULL,            -- unique among Images that are not deleted
    state          TEXT NOT NULL DEFAULT 'importing'
                   CHECK (state IN ('importing', 'ready', 'failed')),
    source         TEXT NOT NULL,            -- 'upload', or the registry reference pulled
    upload_path    TEXT,                     -- the uploaded archive under <data_dir>/images/uploads
    upload_sha256  TEXT,                     -- 'sha256:<hex>' of the uploaded body as it arrived
    upload_bytes   INTEGER,                  -- its size
    credentials    TEXT,                     -- JSON {username, password} for the pull; cleared when
                                             -- the import ends, never returned by the API
    problem_code   TEXT,                     -- why it failed (a stable code), NULL otherwise
    problem_detail TEXT,
    digest         TEXT,                     -- 'sha256:<hex>' of the image's config blob, once ready
    layer_count    INTEGER,
    unpacked_bytes INTEGER,                  -- size of the unpacked tree
    entrypoint     TEXT,                     -- the image config's Entrypoint (JSON array or NULL)
    cmd            TEXT,                     -- its Cmd (JSON array or NULL)
    env            TEXT,                     -- its Env (JSON array of "K=V" or NULL)
    working_dir    TEXT,                     -- its WorkingDir (NULL when empty)
    config_user    TEXT,                     -- its User (NULL when empty)
    manifest_digest TEXT,                    -- a pull's image manifest, by which other hosts pull
    claimed_by     TEXT,                     -- the worker importing it while importing
    claimed_at     INTEGER,
    created_at     INTEGER NOT NULL,
    ready_at       INTEGER,                  -- when it became ready or failed
    last_used_at   INTEGER,                  -- last boot of a Sandbox on it (cache eviction)
    deleted_at     INTEGER
);
CREATE UNIQUE INDEX images_name ON images (name) WHERE deleted_at IS NULL;
-- The import queue: what workers claim, oldest first.
CREATE INDEX images_importing ON images (created_at) WHERE state = 'importing';
CREATE INDEX images_digest ON images (digest) WHERE digest IS NOT NULL;
-- The Image an App names (NULL: 'default'), the digest it resolved to ('default' for the built-in
-- rootfs; existing Apps booted it whatever their image label said) and the App's own environment
-- (a JSON object), applied over the image's.
ALTER TABLE apps ADD COLUMN image_id TEXT REFERENCES images (id);
ALTER TABLE apps ADD COLUMN image_digest TEXT NOT NULL DEFAULT 'default';
ALTER TABLE apps ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
-- The Apps that refer to an Image (the 409 on DELETE, cache eviction).
CREATE INDEX apps_image ON apps (image_id) WHERE image_id IS NOT NULL;

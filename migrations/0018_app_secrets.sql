-- 0018_app_secrets: an App's secrets (docs/secrets.md), write-only through the API. The value is
-- sealed with ChaCha20-Poly1305 under the secrets key, which is kept outside the database
-- (<ca_dir>/secrets.key or secrets_key_file): nonce and ciphertext (with its 16-byte tag) are
-- all that is stored, and the associated data binds app_id and name, so a row moved to another
-- App or name does not open. key_id names the key that sealed it. Deleting the App deletes them.
CREATE TABLE app_secrets (
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT NOT NULL,
    hosts      TEXT NOT NULL,    -- JSON list of host names and "*." wildcards
    nonce      BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    key_id     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE TRIGGER app_secrets_app_deleted AFTER UPDATE OF deleted_at ON apps
WHEN NEW.deleted_at IS NOT NULL
BEGIN
    DELETE FROM app_secrets WHERE app_id = NEW.id;
END;

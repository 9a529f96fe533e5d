-- 0018_app_secrets (PostgreSQL): the same as migrations/0018_app_secrets.sql for SQLite: an
-- App's secrets, sealed under a key kept outside the database (docs/secrets.md).
CREATE TABLE app_secrets (
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT NOT NULL,
    hosts      TEXT NOT NULL,
    nonce      BYTEA NOT NULL,
    ciphertext BYTEA NOT NULL,
    key_id     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE FUNCTION app_secrets_app_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM app_secrets WHERE app_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER app_secrets_app_deleted AFTER UPDATE OF deleted_at ON apps
FOR EACH ROW WHEN (NEW.deleted_at IS NOT NULL)
EXECUTE FUNCTION app_secrets_app_deleted();

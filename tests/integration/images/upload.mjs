// upload.mjs: what the image tests share to put an image on a test installation: the upload
// (POST /v1/images with the archive streamed as the body) and the wait for its import to end.
import assert from 'node:assert/strict';
import { createReadStream } from 'node:fs';
import { req } from '../worker/harness.mjs';

// POSTs an archive as image `name`; returns the answer whatever its status.
export async function postImage(sbx, name, file, contentType = 'application/x-tar') {
  const res = await fetch(`${sbx.gw.url}/v1/images?name=${encodeURIComponent(name)}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${sbx.gw.admin}`, 'Content-Type': contentType },
    body: createReadStream(file),
    duplex: 'half',
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null, text, headers: res.headers };
}

// The image (by id or name) once its import has ended, ready or failed.
export async function settledImage(sbx, idOrName, timeoutMs = 120000) {
  return sbx.until(async () => {
    const r = await req(sbx.gw, 'GET', `/v1/images/${encodeURIComponent(idOrName)}`, { token: sbx.gw.admin });
    assert.equal(r.status, 200, r.text);
    return r.json.state !== 'importing' ? r.json : null;
  }, timeoutMs, `the import of ${idOrName}`);
}

// Uploads an archive (which must be accepted: 202) and returns the image once its import ended.
export async function importImage(sbx, name, file, timeoutMs = 120000) {
  const r = await postImage(sbx, name, file);
  assert.equal(r.status, 202, r.text);
  return settledImage(sbx, r.json.id, timeoutMs);
}

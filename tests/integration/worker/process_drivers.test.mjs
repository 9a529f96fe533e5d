// process_drivers.test.mjs: an App whose driver no live worker can run is refused (422 naming the
// driver and the worker's reason) at create and at update; before any worker has said what it can
// run, and after the last one stopped, such an App is accepted (no evidence either way). One
// gateway, real sbx-worker, no Sandbox booted (pool 0).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startSbx, req } from './harness.mjs';

test('an App whose driver no worker can run is refused at create and update', async () => {
  // A qemu binary that cannot exist, so that qemu is unusable whatever this host has built.
  const sbx = await startSbx({
    workers: 0,
    env: { SBX_POOL_SIZE: '0', SBX_QEMU_BIN: 'sbx-no-such-qemu', SBX_JAILER_BIN: '', SBX_FIRECRACKER_BIN: '' },
  });
  try {
    const create = (name, driver) => req(sbx.gw, 'POST', '/v1/apps', { token: sbx.gw.admin, body: { name, driver } });

    // No worker yet: nothing says qemu cannot run, so the App is accepted.
    const early = await create('early-qemu', 'qemu');
    assert.equal(early.status, 201, early.text);

    const w = sbx.startWorker();
    const recorded = await sbx.until(() => sbx.sql(`SELECT drivers FROM workers WHERE stopped_at IS NULL AND drivers IS NOT NULL`), 30000, 'the worker to record its drivers');
    const drivers = JSON.parse(recorded);
    assert.equal(drivers.process, true, recorded);
    assert.match(drivers.qemu, /sbx-no-such-qemu/, recorded);
    assert.equal(typeof drivers.firecracker, 'string', recorded);

    const refused = await create('late-qemu', 'qemu');
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.json.code, 'invalid-value');
    assert.equal(refused.json.field, 'driver');
    assert.match(refused.json.detail, /"qemu"/);
    assert.match(refused.json.detail, /sbx-no-such-qemu not found/);
    const fc = await create('late-fc', 'firecracker');
    assert.equal(fc.status, 422, fc.text);
    assert.match(fc.json.detail, /"firecracker".*jailer_bin/);

    // The process driver runs everywhere; moving that App to qemu is refused and changes nothing.
    const ok = await create('proc', 'process');
    assert.equal(ok.status, 201, ok.text);
    const patch = await req(sbx.gw, 'PATCH', `/v1/apps/${ok.json.id}`, { token: sbx.gw.admin, body: { driver: 'qemu' } });
    assert.equal(patch.status, 422, patch.text);
    assert.match(patch.json.detail, /"qemu"/);
    const after = await req(sbx.gw, 'GET', `/v1/apps/${ok.json.id}`, { token: sbx.gw.admin });
    assert.equal(after.json.driver, 'process');
    const same = await req(sbx.gw, 'PATCH', `/v1/apps/${ok.json.id}`, { token: sbx.gw.admin, body: { driver: 'process' } });
    assert.equal(same.status, 200, same.text);

    // The last worker stopped: again no evidence, and the App is accepted.
    w.kill('SIGTERM');
    await w.exited;
    const again = await create('after-qemu', 'qemu');
    assert.equal(again.status, 201, again.text);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

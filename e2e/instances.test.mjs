// Two exchange processes on one database, behind nothing but their ports:
// the second serves the first's embedded database through MONGODB_URI and
// shares its DATA_DIR (the same SECRET_KEY and signing key). A sign-in on
// one is good on the other, a refresh on the second rotates the grant for
// both, sign-in throttling counts the failures made at either, ids created
// at once on both never collide and no write is lost, and the commands
// work against either.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { openSync, writeFileSync, mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  api, batchBundle, bearerToken, codeFlowTokens, env, fhir, formSignIn, heartRates, ownPatient, tokenRequest,
} from './lib.mjs';

const first = env('EXCHANGE_URL');
let second;
let child;
let exited;

/** A free TCP port on loopback. */
function freePort() {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.on('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

before(async () => {
  const port = await freePort();
  second = `http://127.0.0.1:${port}`;
  // Its log joins the others in EXCHANGE_LOG_DIR, for log-scan.mjs.
  const log = openSync(join(env('EXCHANGE_LOG_DIR'), 'serve-2.log'), 'a');
  // From the repository's root, as e2e/run starts the first: the standards
  // data is found where /ready checks for it.
  child = spawn(env('EXCHANGE_BIN'), ['serve'], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, PORT: String(port), MONGODB_URI: env('EXCHANGE_MONGO_URI') },
    stdio: ['ignore', log, log],
  });
  exited = new Promise((ok) => child.on('exit', ok));
  for (let i = 0; i < 240; i++) {
    try {
      if ((await fetch(`${second}/ready`)).status === 200) return;
    } catch {}
    if (child.exitCode !== null) throw new Error(`the second instance exited (${child.exitCode}); see serve-2.log`);
    await new Promise((ok) => setTimeout(ok, 250));
  }
  throw new Error('the second instance is not ready after 60 s');
});

after(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await exited;
  }
});

describe('two instances on one database', () => {
  it('signs in on one, uses the token on the other, refreshes on the second', async () => {
    const { session } = await formSignIn(first, 'alice@example.org', 'exchange-demo-password');
    assert.ok(session, 'alice signs in on the first');
    const tokens = await codeFlowTokens(first, session);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.json));
    const profile = await api('/users/profile', { token: tokens.json.access_token, base: second });
    assert.equal(profile.status, 200);
    assert.equal(profile.json.email, 'alice@example.org');

    const refreshed = await tokenRequest(second, { grant_type: 'refresh_token', refresh_token: tokens.json.refresh_token });
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.json));
    assert.equal((await api('/users/profile', { token: refreshed.json.access_token, base: first })).status, 200);
    // The rotated refresh token is spent for both: reusing it at the first is refused.
    const reused = await tokenRequest(first, { grant_type: 'refresh_token', refresh_token: tokens.json.refresh_token });
    assert.equal(reused.json.error, 'invalid_grant');
  });

  it('counts sign-in throttling across both', async () => {
    // Wrong passwords for one account from one address (through the
    // trusted loopback proxy), alternating between the instances. Counted
    // per instance, each would allow its own free failures (5 for an
    // account at an address) and the first refusal would come after 10;
    // counted in the database, it comes right after the 5th, or soon after
    // when the machine is slow (each failure doubles the next wait).
    const account = `nobody-${randomBytes(4).toString('hex')}@example.org`;
    const address = '203.0.113.77';
    let firstThrottled = 0;
    for (let attempt = 1; attempt <= 9 && !firstThrottled; attempt++) {
      const { res } = await formSignIn(attempt % 2 ? first : second, account, `wrong-${attempt}-password`, { forwardedFor: address });
      if (res.status === 429) firstThrottled = attempt;
      else assert.equal(res.status, 401, `attempt ${attempt}`);
    }
    assert.ok(firstThrottled >= 6 && firstThrottled <= 9, `the first throttled attempt is #${firstThrottled}`);
    // The other instance refuses the next attempt too.
    const other = firstThrottled % 2 ? second : first;
    const { res } = await formSignIn(other, account, 'wrong-again-password', { forwardedFor: address });
    assert.equal(res.status, 429);
  });

  it('creates ids on both at once: none given twice, no write lost', { timeout: 120_000 }, async () => {
    const admin = await bearerToken('admin@example.org');
    const patient = await ownPatient('instances');
    const manager = await bearerToken(patient.managerEmail);
    // Teams of the test's own organization, so that no other test's counts change.
    const creates = Array.from({ length: 30 }, (_, i) =>
      api('/organizations', { token: admin, method: 'POST', base: i % 2 ? second : first,
        body: { name: `Team ${i}`, type: 'team', partOf: patient.organizationId } }));
    const orgs = await Promise.all(creates);
    for (const o of orgs) assert.equal(o.status, 201, JSON.stringify(o.json));
    const ids = orgs.map((o) => o.json.id);
    assert.equal(new Set(ids).size, ids.length, `organization ids ${ids}`);

    const batches = await Promise.all(Array.from({ length: 6 }, (_, i) =>
      fhir(`${i % 2 ? second : first}/FHIR/R5/`, { token: manager, method: 'POST', body: batchBundle(heartRates(patient.id, 10, `inst${i}`)) })));
    const observationIDs = [];
    for (const b of batches) {
      assert.equal(b.status, 200, b.text);
      for (const e of b.json.entry) {
        assert.equal(e.response.status, '201 Created', JSON.stringify(e.response));
        observationIDs.push(e.resource.id);
      }
    }
    assert.equal(new Set(observationIDs).size, 60, `observation ids ${observationIDs}`);
    for (const origin of [first, second]) {
      const count = await fhir(`${origin}/FHIR/R5/Observation?patient=${patient.id}&_summary=count`, { token: manager });
      assert.equal(count.json.total, 60, `the count on ${origin}`);
    }
  });

  it('runs the commands against either instance', async () => {
    const run = promisify(execFile);
    // healthcheck asks the instance on PORT: the second.
    const { stdout } = await run(env('EXCHANGE_BIN'), ['healthcheck'], { env: { ...process.env, PORT: new URL(second).port } });
    assert.equal(stdout.trim(), 'ok');
    // An import through the second, with a token the command line made for the database both share.
    const token = await bearerToken('admin@example.org');
    const dir = mkdtempSync(join(tmpdir(), 'exchange-e2e-instances-'));
    const file = join(dir, 'procedure.json');
    writeFileSync(file, JSON.stringify({
      resourceType: 'Procedure', id: `proc-inst-${randomBytes(3).toString('hex')}`, status: 'completed',
      code: { text: 'Checkup' }, subject: { reference: 'Patient/a1' },
    }));
    const imported = await run(env('EXCHANGE_BIN'), ['import', 'r4', '--url', second, '--source', '1', '--report', join(dir, 'report.ndjson'), file],
      { env: { ...process.env, EXCHANGE_TOKEN: token } });
    assert.match(imported.stdout, /1 resources read: 1 converted/);
  });
});

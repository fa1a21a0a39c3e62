// Analysts' access: the real mongosh CLI (npm package mongosh) connects to
// the embedded database (FerretDB on the MongoDB wire protocol) while the
// service runs, and reads the demo data.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { env } from './lib.mjs';

const run = promisify(execFile);
const mongosh = fileURLToPath(new URL('node_modules/.bin/mongosh', import.meta.url));
const uri = `${env('EXCHANGE_MONGO_URI')}exchange`;

/** Evaluates one expression in mongosh and returns what it printed. */
async function mongoshEval(expression) {
  const { stdout } = await run(mongosh, [uri, '--quiet', '--norc', '--eval', expression], {
    timeout: 60_000,
    env: { ...process.env, NO_COLOR: '1' },
  });
  return stdout.trim();
}

describe('mongosh against the embedded database', () => {
  it('counts the 11 demo users', { timeout: 90_000 }, async () => {
    assert.equal(await mongoshEval('db.users.countDocuments()'), '11');
  });

  it('counts the 4 demo patients', { timeout: 90_000 }, async () => {
    assert.equal(await mongoshEval('db.users.countDocuments({userType: "patient"})'), '4');
  });

  it('finds a patient by email', { timeout: 90_000 }, async () => {
    const out = await mongoshEval(
      'EJSON.stringify(db.users.find({email: "alice@example.org"}, {_id: 0, email: 1, userType: 1}).toArray())',
    );
    assert.deepEqual(JSON.parse(out), [{ email: 'alice@example.org', userType: 'patient' }]);
  });
});

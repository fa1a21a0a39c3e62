// The logs of the whole run, read line by line for what must never be in
// them. e2e/run starts the exchange and the gateway at LOG_LEVEL=debug and
// runs this file after every *.test.mjs, while both still serve; the
// second instance of instances.test.mjs logs beside them. What is looked
// for: every secret and data value the tests remembered (lib.mjs: bearer
// tokens sent, tokens and codes handed out, cookies, passwords typed,
// client secrets, uploaded data points and their Base64), the secret key,
// and the names and emails of every patient and user.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, bearerToken, env } from './lib.mjs';

// The log lines: JSON objects. The files also hold what the exchange prints
// on stdout for a person starting it, the start-up banner (cmd/exchange
// serve.go: its address, the demo login), which is not a log; anything
// else that is not JSON (a panic, a library printing on its own) would
// escape both LOG_LEVEL and this scan, and fails it.
const banner = /^(Clinical data exchange listening on |  (OpenID Connect discovery|Database|Analysts|Log in): |  No users yet\. |  or create your own login )/;
const dir = env('EXCHANGE_LOG_DIR');
const logs = readdirSync(dir)
  .filter((f) => /^(serve(-\d+)?|gateway)\.log$/.test(f))
  .map((f) => {
    const all = readFileSync(join(dir, f), 'utf8').split('\n').filter((l) => l !== '');
    return { name: f, lines: all.filter((l) => l.startsWith('{')), other: all.filter((l) => !l.startsWith('{') && !banner.test(l)) };
  });

/** Every page of an admin API list. */
async function all(path, token) {
  const out = [];
  for (let page = 1; ; page++) {
    const res = await api(`${path}${path.includes('?') ? '&' : '?'}page=${page}&pageSize=100`, { token });
    assert.equal(res.status, 200, `${path}: ${JSON.stringify(res.json)}`);
    out.push(...res.json.results);
    if (!res.json.next) return out;
  }
}

describe('the logs of this run', () => {
  it('were written at debug level by every program, a line per request', () => {
    for (const name of ['serve.log', 'gateway.log', 'serve-2.log']) {
      const log = logs.find((l) => l.name === name);
      assert.ok(log, `${name} is missing from ${dir}`);
      const records = log.lines.map((l) => JSON.parse(l));
      assert.ok(records.some((r) => r.level === 'DEBUG'), `${name} has a debug line`);
      assert.ok(records.filter((r) => r.msg === 'request' && r.request_id && r.route && r.status).length > 0, `${name} has request lines`);
    }
  });

  it('are JSON lines, but for the exchange\'s start-up banner', () => {
    const stray = logs.flatMap(({ name, other }) => other.map((l) => `${name}: ${l.slice(0, 200)}`));
    assert.deepEqual(stray.slice(0, 20), [], `${stray.length} lines are neither log lines nor the banner`);
  });

  it('hold no secret, data value, name or email', async () => {
    const values = new Set(
      readFileSync(env('EXCHANGE_SECRETS_FILE'), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)),
    );
    assert.ok(values.size > 10, `only ${values.size} values were remembered: are the tests remembering?`);
    values.add('exchange-demo-password');
    values.add(env('MCP_OAUTH_CLIENT_SECRET'));
    values.add(env('EXCHANGE_METRICS_TOKEN'));
    values.add(readFileSync(join(env('DATA_DIR'), 'secret_key'), 'utf8').trim());
    // Names and emails: every patient's and user's, as the admin API shows them.
    const admin = await bearerToken('admin@example.org');
    const words = new Set();
    for (const p of await all('/patients', admin)) {
      for (const n of [p.nameFamily, ...(p.givenNames ?? [])]) if (n && n.length >= 4) words.add(n);
      for (const t of p.telecom ?? []) values.add(t.value);
    }
    for (const u of await all('/users', admin)) values.add(u.email);
    assert.ok(words.size >= 8, `names ${[...words]}`);

    const names = [...words].map((w) => [w, new RegExp(`\\b${w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\b`)]);
    const found = [];
    for (const { name, lines } of logs) {
      lines.forEach((line, i) => {
        for (const v of values) {
          if (v.length >= 8 && line.includes(v)) found.push(`${name}:${i + 1} holds ${JSON.stringify(v.slice(0, 24))}…: ${line.slice(0, 200)}`);
        }
        for (const [w, re] of names) {
          if (re.test(line)) found.push(`${name}:${i + 1} holds the name ${w}: ${line.slice(0, 200)}`);
        }
      });
    }
    assert.deepEqual(found.slice(0, 20), [], `${found.length} lines hold secrets or data`);
    console.log(`# scanned ${logs.map((l) => `${l.name} (${l.lines.length} lines)`).join(', ')} for ${values.size} values and ${words.size} names`);
  });
});

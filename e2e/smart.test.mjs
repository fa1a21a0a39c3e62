// SMART App Launch and client authentication as standard clients meet
// them: npm fhirclient's browser build runs a standalone patient launch in
// headless Chromium (a SMART app in a page of its own origin, as real apps
// are: it calls the token endpoint and the FHIR API cross-origin), and
// npm openid-client authenticates a confidential client with
// client_secret_basic and with client_secret_post at the token,
// introspection and revocation endpoints.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as client from 'openid-client';
import {
  artifactsDir, batchBundle, bearerToken, env, exchangeCommand, fhir, launchChromium, nativeObservation,
  newCallbackPage, omhDataPoint, signIn, waitForCallback,
} from './lib.mjs';

const base = env('EXCHANGE_URL');
const fhirBase = `${base}/FHIR/R5`;
const issuer = `${base}/o`;
const password = 'exchange-demo-password';
const fhirClientJS = fileURLToPath(new URL('./node_modules/fhirclient/build/fhir-client.js', import.meta.url));

let browser;
/**
 * The SMART app's own web server on a loopback port: its pages (set per
 * launch) and fhirclient's browser build. A real server, not a routed
 * page: Chromium lets a page reach loopback addresses (the exchange) only
 * from a loopback origin.
 */
let appServer, appDir;
let appPages = {};
/** The seeded patient alice, her Patient id, a full-access token of hers, her FHIR source. */
const alice = { email: 'alice@example.org' };

/** Registers an OAuth client with `exchange clients register`; its id and secret. */
async function registerClient(...flags) {
  const out = await exchangeCommand('clients', 'register', ...flags);
  const id = out.match(/^client_id=(.+)$/m)?.[1];
  assert.ok(id, `clients register printed no client_id: ${out}`);
  return { id, secret: out.match(/^client_secret=(.+)$/m)?.[1] };
}

before(async () => {
  browser = await launchChromium();
  const script = await readFile(fhirClientJS);
  appServer = createServer((req, res) => {
    const name = new URL(req.url, 'http://app').pathname.replace(/^\/smart-app\//, '');
    const body = name === 'fhir-client.js' ? script : appPages[name];
    if (body === undefined) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'Content-Type': name.endsWith('.js') ? 'text/javascript' : 'text/html; charset=utf-8' }).end(body);
  });
  await new Promise((ok) => appServer.listen(0, '127.0.0.1', ok));
  appDir = `http://127.0.0.1:${appServer.address().port}/smart-app/`;
  alice.token = await bearerToken(alice.email);
  const profile = await (await fetch(`${base}/api/v1/users/profile`, { headers: { Authorization: `Bearer ${alice.token}` } })).json();
  alice.patient = String(profile.patient.id);
  // A heart rate of hers, for the app to find.
  const obs = nativeObservation({
    patient: alice.patient, device: 1, identifier: 'smart-hr-1',
    dataPoint: omhDataPoint('smart-hr-1', 'heart-rate', '2.0', {
      heart_rate: { value: 61, unit: 'beats/min' }, effective_time_frame: { date_time: '2025-03-21T07:00:00Z' },
    }),
  });
  const created = await fhir('/Observation', { token: alice.token, method: 'POST', body: obs });
  assert.equal(created.status, 201, created.text);
  const sources = await (await fetch(`${base}/api/v1/fhir_sources`, { headers: { Authorization: `Bearer ${alice.token}` } })).json();
  alice.source = String(sources.results[0].id);
  const condition = await fhir('/Condition', { token: alice.token, method: 'POST', body: condition_('smart-c-1'), headers: { 'X-SERVICE-FHIR-Source-ID': alice.source } });
  assert.equal(condition.status, 201, condition.text);
  alice.condition = condition.json.id;
});

after(async () => {
  await browser?.close();
  appServer?.close();
});

/** An imported Condition with an upstream id. */
function condition_(id) {
  return {
    resourceType: 'Condition', id,
    clinicalStatus: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'active' }] },
    code: { coding: [{ system: 'http://snomed.info/sct', code: '38341003' }] },
    subject: { reference: 'Patient/upstream' },
  };
}

/**
 * The SMART app: launch.html starts fhirclient's standalone launch with
 * the scope; app.html completes it, reads the patient, searches her
 * Observations, refreshes, and leaves what it found in window.result.
 */
function pagesOf(clientId, scope) {
  const head = '<!doctype html><meta charset="utf-8"><script src="fhir-client.js"></script>';
  return {
    'launch.html': `${head}<title>launch</title><script>
      FHIR.oauth2.authorize(${JSON.stringify({ iss: fhirBase, clientId, scope, redirectUri: 'app.html' })});
    </script>`,
    'app.html': `${head}<title>app</title><pre id="out"></pre><script>
      const failure = (e) => String(e && e.message || e);
      FHIR.oauth2.ready().then(async (c) => {
        const result = { patientId: c.patient.id, fhirUser: c.getFhirUser(), fhirUserClaim: (c.getIdToken() || {}).fhirUser,
          scope: c.state.tokenResponse.scope,
          accessToken: c.state.tokenResponse.access_token };
        try {
          result.patient = await c.patient.read();
          result.observations = await c.request('Observation?patient=' + c.patient.id, { flat: true, pageLimit: 0 });
          if (c.state.tokenResponse.refresh_token) {
            await c.refresh();
            result.patientAfterRefresh = c.state.tokenResponse.patient;
          }
        } catch (e) {
          result.error = failure(e);
        }
        return result;
      }).catch((e) => ({ error: failure(e) })).then((r) => {
        window.result = r;
        document.getElementById('out').textContent = JSON.stringify(r, null, 1);
      });
    </script>`,
  };
}

/** Runs the app's launch as alice, allowing what it asks; resolves to window.result. */
async function launch(scope, screenshot) {
  const app = await registerClient('--name', `fhirclient app ${scope}`, '--type', 'public', '--redirect-uri', `${appDir}app.html`);
  appPages = pagesOf(app.id, scope);
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    // What the app says, for a failure's message.
    const said = [];
    page.on('console', (m) => said.push(`console ${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => said.push(`page error: ${e.message}`));
    await page.goto(`${appDir}launch.html`);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor().catch(async (e) => {
      throw new Error(`no login page at ${page.url()}: ${e.message}\n${said.join('\n')}\n${(await page.content()).slice(0, 2000)}`);
    });
    assert.equal(new URL(page.url()).origin, base, 'fhirclient sent the browser to the exchange');
    const login = await signIn(page, alice.email, password);
    assert.equal(login.status(), 303);
    await page.getByRole('button', { name: 'Allow' }).waitFor();
    if (screenshot) await page.screenshot({ path: join(artifactsDir(), screenshot), fullPage: true });
    const consent = await page.locator('main').innerText();
    await page.getByRole('button', { name: 'Allow' }).click();
    await page.waitForFunction(() => window.result !== undefined, null, { timeout: 60_000 });
    return { result: await page.evaluate(() => window.result), consent };
  } finally {
    await context.close();
  }
}

describe('fhirclient standalone launch', { concurrency: false }, () => {
  it('gets the patient context, reads the Patient and searches her Observations', { timeout: 120_000 }, async () => {
    const { result, consent } = await launch('openid fhirUser launch/patient patient/*.rs offline_access', 'smart-consent.png');
    assert.equal(result.error, undefined, `the app failed: ${result.error}`);
    assert.match(consent, /Open your patient record/);
    assert.match(consent, /Read and search your data of every kind/);
    assert.equal(result.patientId, alice.patient, 'the token response names her patient');
    assert.equal(result.scope, 'openid fhirUser launch/patient patient/*.rs offline_access');
    assert.equal(result.fhirUser, `Patient/${alice.patient}`, 'fhirclient reads fhirUser of the ID token');
    assert.equal(result.fhirUserClaim, `${fhirBase}/Patient/${alice.patient}`, 'the claim is an absolute URL');
    assert.equal(result.patient.resourceType, 'Patient');
    assert.equal(result.patient.id, alice.patient);
    assert.ok(result.observations.length >= 1, 'her heart rate is found');
    for (const o of result.observations) assert.equal(o.subject.reference, `Patient/${alice.patient}`);
    assert.equal(result.patientAfterRefresh, alice.patient, 'the patient context survives a refresh');
  });

  it('limits a patient/Observation.rs token to her Observations: no Patient search, no write', { timeout: 120_000 }, async () => {
    const { result } = await launch('openid launch/patient patient/Observation.rs');
    assert.match(result.error ?? '', /403|Forbidden/, 'fhirclient cannot read the Patient');
    assert.equal(result.patientId, alice.patient);
    const token = result.accessToken;
    assert.ok(token, 'fhirclient holds the access token');
    const forbidden = (res, what) => {
      assert.equal(res.status, 403, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
      assert.equal(res.json.resourceType, 'OperationOutcome', what);
      assert.equal(res.json.issue[0].code, 'forbidden', what);
    };
    const patients = await fhir('/Patient', { token });
    forbidden(patients, 'Patient search');
    assert.match(patients.json.issue[0].diagnostics, /patient\/Patient\.s/);
    const obs = await fhir('/Observation', { token });
    assert.equal(obs.status, 200);
    assert.ok(obs.json.entry.every((e) => e.resource.subject.reference === `Patient/${alice.patient}`));

    const source = { 'X-SERVICE-FHIR-Source-ID': alice.source };
    const observation = nativeObservation({
      patient: alice.patient, device: 1, identifier: 'smart-hr-2',
      dataPoint: omhDataPoint('smart-hr-2', 'heart-rate', '2.0', {
        heart_rate: { value: 62, unit: 'beats/min' }, effective_time_frame: { date_time: '2025-03-22T07:00:00Z' },
      }),
    });
    forbidden(await fhir('/Observation', { token, method: 'POST', body: observation }), 'create a native Observation');
    forbidden(await fhir('/Condition', { token, method: 'POST', body: condition_('smart-c-2'), headers: source }), 'create an imported Condition');
    const current = await fhir(`/Condition/${alice.condition}`, { token: alice.token });
    forbidden(await fhir(`/Condition/${alice.condition}`, { token, method: 'PUT', body: current.json }), 'update');
    forbidden(await fhir(`/Condition/${alice.condition}`, {
      token, method: 'PATCH', body: { onsetDateTime: '2020-01-01' }, headers: { 'Content-Type': 'application/merge-patch+json' },
    }), 'patch');
    forbidden(await fhir(`/Condition/${alice.condition}`, { token, method: 'DELETE' }), 'delete');
    const batch = await fhir('', { token, method: 'POST', body: batchBundle([observation]) });
    assert.equal(batch.status, 200);
    assert.equal(batch.json.entry[0].response.status, '403 Forbidden', 'a batch entry');
    const r4 = await fetch(`${base}/fhir-import/R4/Condition`, {
      method: 'POST', body: JSON.stringify(condition_('smart-c-3')),
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/fhir+json', ...source },
    });
    assert.equal((await r4.json()).entry[0].response.status, '403 Forbidden', 'an R4 import');
    assert.equal((await fhir(`/Condition/${alice.condition}`, { token: alice.token })).json.meta.versionId, current.json.meta.versionId,
      'the Condition is unchanged');
  });
});

describe('confidential clients authenticate with client_secret_basic or client_secret_post', { concurrency: false }, () => {
  const redirectUri = env('EXCHANGE_REDIRECT_URI');
  let registered;
  before(async () => {
    registered = await registerClient('--name', 'e2e confidential', '--type', 'confidential', '--redirect-uri', redirectUri);
  });

  /** Runs the code flow for the client configured with one auth method; the token response. */
  async function tokens(config, email) {
    const codeVerifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri, scope: 'openid email offline_access', state,
      code_challenge: await client.calculatePKCECodeChallenge(codeVerifier), code_challenge_method: 'S256',
    });
    const { context, page } = await newCallbackPage(browser, redirectUri);
    try {
      await page.goto(url.href);
      assert.equal((await signIn(page, email, password)).status(), 303);
      const callback = waitForCallback(page, redirectUri);
      await page.getByRole('button', { name: 'Allow' }).click();
      const returned = await callback;
      return await client.authorizationCodeGrant(config, returned, { pkceCodeVerifier: codeVerifier, expectedState: state });
    } finally {
      await context.close();
    }
  }

  for (const [method, auth, email] of [
    ['client_secret_basic', client.ClientSecretBasic, 'bob@example.org'],
    ['client_secret_post', client.ClientSecretPost, 'carol@example.org'],
  ]) {
    it(`${method} at the token, introspection and revocation endpoints`, { timeout: 90_000 }, async () => {
      const config = await client.discovery(new URL(issuer), registered.id, undefined, auth(registered.secret), {
        execute: [client.allowInsecureRequests],
      });
      const m = config.serverMetadata();
      for (const key of ['token_endpoint_auth_methods_supported', 'introspection_endpoint_auth_methods_supported', 'revocation_endpoint_auth_methods_supported']) {
        assert.ok(m[key].includes(method), `${key} advertises ${method}`);
      }
      const granted = await tokens(config, email);
      const introspected = await client.tokenIntrospection(config, granted.access_token);
      assert.equal(introspected.active, true);
      assert.equal(introspected.client_id, registered.id);
      const refreshed = await client.refreshTokenGrant(config, granted.refresh_token);
      assert.ok(refreshed.access_token);
      await client.tokenRevocation(config, refreshed.refresh_token);
      assert.equal((await client.tokenIntrospection(config, refreshed.access_token)).active, false, 'the revoked grant is inactive');
    });
  }

  it('refuses the other method where the registration pins one', { timeout: 30_000 }, async () => {
    const pinned = await registerClient('--name', 'e2e pinned', '--type', 'confidential', '--redirect-uri', redirectUri,
      '--auth-method', 'client_secret_basic');
    const post = await client.discovery(new URL(issuer), pinned.id, undefined, client.ClientSecretPost(pinned.secret), {
      execute: [client.allowInsecureRequests],
    });
    await assert.rejects(client.tokenIntrospection(post, 'x'), (err) => err.error === 'invalid_client' || err.status === 401);
    const basic = await client.discovery(new URL(issuer), pinned.id, undefined, client.ClientSecretBasic(pinned.secret), {
      execute: [client.allowInsecureRequests],
    });
    assert.equal((await client.tokenIntrospection(basic, 'x')).active, false);
  });
});

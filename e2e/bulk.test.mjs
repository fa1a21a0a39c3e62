// FHIR Bulk Data export with the clients analysts and bulk pipelines use:
// a SMART Backend Services sign-in with npm openid-client (private_key_jwt
// signed with jose keys, RS384 and ES384; the keys registered as a JWKS
// file and as a JWKS URL), then npm @medplum/core's bulkExport, which
// kicks off with POST and query parameters and polls the status URL every
// second, and the NDJSON files it lists, downloaded with the token.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as client from 'openid-client';
import * as jose from 'jose';
import { api, batchBundle, bearerToken, env, exchangeCommand, fhir, heartRates, ownPatient, remember } from './lib.mjs';

// @medplum/core reads WebSocket when it loads (its subscriptions, unused
// here); Node before 22 has none.
globalThis.WebSocket ??= class WebSocket {};
const { MedplumClient } = await import('@medplum/core');

const base = env('EXCHANGE_URL');
const issuer = `${base}/o`;
const tokenEndpoint = `${issuer}/token/`;

/** A key pair of a backend client, and its public JWK (a kid, no "use": the exchange adds it). */
async function keyPair(alg) {
  const { publicKey, privateKey } = await jose.generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await jose.exportJWK(publicKey)), kid: `${alg}-${randomBytes(4).toString('hex')}`, alg };
  return { privateKey, jwk, alg };
}

/** Registers a backend client with `exchange clients register --type backend`; its id. */
async function registerBackend(actsFor, ...flags) {
  const out = await exchangeCommand('clients', 'register', '--type', 'backend', '--name', `Bulk ${randomBytes(3).toString('hex')}`,
    '--acts-for', actsFor, ...flags);
  const id = out.match(/^client_id=(.+)$/m)?.[1];
  assert.ok(id, `clients register printed no client_id: ${out}`);
  assert.doesNotMatch(out, /client_secret/, 'a backend client has no secret');
  return id;
}

/** An openid-client configuration that authenticates with the key (private_key_jwt). */
async function backendConfig(clientId, key, options) {
  return client.discovery(new URL(issuer), clientId, undefined, client.PrivateKeyJwt({ key: key.privateKey, kid: key.jwk.kid }, options), {
    execute: [client.allowInsecureRequests],
  });
}

/** A client assertion signed with jose, with claims changed by edit; its token request's answer. */
async function assertionRequest(clientId, key, claims = {}, header = {}) {
  const now = Math.floor(Date.now() / 1000);
  const assertion = await new jose.SignJWT({ jti: randomBytes(12).toString('hex'), ...claims })
    .setProtectedHeader({ alg: key.alg, kid: key.jwk.kid, typ: 'JWT', ...header })
    .setIssuer(clientId).setSubject(clientId).setAudience(tokenEndpoint).setIssuedAt(now).setExpirationTime(claims.exp ?? now + 240)
    .sign(key.privateKey);
  remember(assertion);
  return postAssertion(assertion);
}

async function postAssertion(assertion, scope = 'system/*.rs') {
  const res = await fetch(tokenEndpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
    body: new URLSearchParams({
      grant_type: 'client_credentials', scope, client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer', client_assertion: assertion,
    }),
  });
  return { status: res.status, json: await res.json() };
}

/** The resources of an NDJSON file, downloaded with the token. */
async function ndjson(url, token) {
  const res = await fetch(url, { headers: { Authorization: `Bearer ${token}`, Accept: 'application/fhir+ndjson' } });
  assert.equal(res.status, 200, url);
  assert.equal(res.headers.get('content-type'), 'application/fhir+ndjson');
  const text = await res.text();
  remember(...text.split('\n'));
  return text.split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

describe('SMART Backend Services and Bulk Data export', () => {
  let dir, jwksServer, jwksURL, study, other, patient, second;
  const rs = {}, es = {};

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bulk-e2e-'));
    // An organization of its own: its manager, and a patient enrolled in
    // two studies: the first shares heart rate (ownPatient), the second
    // asks for step counts only, which the patient has not answered.
    patient = await ownPatient('bulk');
    const admin = await bearerToken('admin@example.org');
    const created = await api('/studies', { token: admin, method: 'POST', body: { organizationId: patient.organizationId, name: `Steps ${randomBytes(3).toString('hex')}` } });
    other = created.json.id;
    const steps = { codingSystem: 'https://w3id.org/openmhealth', codingCode: 'omh:step-count:3.0' };
    assert.equal((await api(`/studies/${other}/scope_requests`, { token: admin, method: 'POST', body: steps })).status, 201);
    assert.equal((await api(`/studies/${other}/patients`, { token: admin, method: 'POST', body: { patientIds: [patient.id] } })).status, 201);
    study = patient.studyId;
    const manager = await bearerToken(patient.managerEmail);
    const upload = await fhir('', { token: manager, method: 'POST', body: batchBundle(heartRates(patient.id, 5, 'bulk')) });
    assert.equal(upload.status, 200, upload.text);
    assert.equal(upload.json.entry.filter((e) => e.response.status === '201 Created').length, 5, upload.text);

    // The RS384 key is registered as a JWKS file, the ES384 key published
    // at a URL of the client's own.
    Object.assign(rs, await keyPair('RS384'));
    Object.assign(es, await keyPair('ES384'));
    const file = join(dir, 'jwks.json');
    await writeFile(file, JSON.stringify({ keys: [rs.jwk] }));
    rs.clientId = await registerBackend(patient.managerEmail, '--jwks-file', file);
    jwksServer = createServer((req, res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ keys: [es.jwk] })));
    await new Promise((ok) => jwksServer.listen(0, '127.0.0.1', ok));
    jwksURL = `http://127.0.0.1:${jwksServer.address().port}/jwks.json`;
    es.clientId = await registerBackend(patient.managerEmail, '--jwks-url', jwksURL);
  });

  after(async () => {
    jwksServer?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('signs in with openid-client: RS384, assertion aud the issuer', async () => {
    const config = await backendConfig(rs.clientId, rs);
    const meta = config.serverMetadata();
    assert.ok(meta.token_endpoint_auth_methods_supported.includes('private_key_jwt'));
    assert.deepEqual(meta.token_endpoint_auth_signing_alg_values_supported, ['RS384', 'ES384']);
    assert.ok(meta.grant_types_supported.includes('client_credentials'));
    const tokens = await client.clientCredentialsGrant(config, { scope: 'system/*.rs' });
    assert.equal(tokens.token_type, 'bearer');
    assert.equal(tokens.scope, 'system/*.rs');
    assert.ok(tokens.expires_in > 0 && tokens.expires_in <= 300, `expires_in ${tokens.expires_in}`);
    assert.equal(tokens.refresh_token, undefined);
    rs.token = tokens.access_token;
    const patients = await fhir('/Patient', { token: rs.token });
    assert.equal(patients.status, 200);
    assert.deepEqual(patients.json.entry.map((e) => e.resource.id), [String(patient.id)], 'the manager reads their organization only');
  });

  it('signs in with openid-client: ES384 keys at a JWKS URL, assertion aud the token URL (SMART)', async () => {
    const config = await backendConfig(es.clientId, es, { [client.modifyAssertion]: (_header, payload) => { payload.aud = tokenEndpoint; } });
    const tokens = await client.clientCredentialsGrant(config, { scope: 'system/Patient.rs system/Observation.rs system/Group.rs' });
    assert.ok(tokens.expires_in <= 300);
    es.token = tokens.access_token;
    const smart = await fetch(`${base}/FHIR/R5/.well-known/smart-configuration`).then((r) => r.json());
    assert.ok(smart.capabilities.includes('client-confidential-asymmetric'));
    assert.ok(smart.scopes_supported.includes('system/*.rs'));
  });

  it('refuses replayed, long-lived and wrongly signed assertions with invalid_client', async () => {
    const now = Math.floor(Date.now() / 1000);
    const assertion = await new jose.SignJWT({ jti: randomBytes(12).toString('hex') })
      .setProtectedHeader({ alg: 'RS384', kid: rs.jwk.kid }).setIssuer(rs.clientId).setSubject(rs.clientId).setAudience(tokenEndpoint)
      .setExpirationTime(now + 120).sign(rs.privateKey);
    assert.equal((await postAssertion(assertion)).status, 200);
    const replay = await postAssertion(assertion);
    assert.equal(replay.json.error, 'invalid_client', JSON.stringify(replay.json));
    const late = await assertionRequest(rs.clientId, rs, { exp: now + 600 });
    assert.equal(late.json.error, 'invalid_client', 'exp ten minutes ahead');
    const forged = await assertionRequest(rs.clientId, es, {}, { kid: rs.jwk.kid });
    assert.equal(forged.json.error, 'invalid_client', 'signed by another key');
    const wrongScope = await postAssertion(await new jose.SignJWT({ jti: randomBytes(12).toString('hex') })
      .setProtectedHeader({ alg: 'RS384', kid: rs.jwk.kid }).setIssuer(rs.clientId).setSubject(rs.clientId).setAudience(tokenEndpoint)
      .setExpirationTime(now + 120).sign(rs.privateKey), 'user/*.rs');
    assert.equal(wrongScope.json.error, 'invalid_scope');
  });

  it('exports a study with @medplum/core: exactly its patients, only what each consented to share with it', async () => {
    const medplum = new MedplumClient({ baseUrl: `${base}/`, fhirUrlPath: 'FHIR/R5', fetch: (...args) => fetch(...args) });
    medplum.setAccessToken(es.token);
    // The steps study: the patient is enrolled, but shares nothing with it.
    const empty = await medplum.bulkExport(`Group/${other}`, 'Patient,Observation', undefined, { pollStatusOnAccepted: true });
    assert.equal(empty.requiresAccessToken, true);
    assert.ok(Array.isArray(empty.error) && Array.isArray(empty.output) && empty.transactionTime, JSON.stringify(empty));
    const types = empty.output.map((o) => o.type);
    assert.deepEqual(types, ['Patient'], `the steps study's export holds ${types}: no observation was shared with it`);
    const patients = await ndjson(empty.output[0].url, es.token);
    assert.deepEqual(patients.map((p) => p.id), [String(patient.id)]);

    // The heart rate study: the patient's five heart rates.
    const manifest = await medplum.bulkExport(`Group/${study}`, 'Patient,Observation,Group', undefined, { pollStatusOnAccepted: true });
    const byType = {};
    for (const out of manifest.output) {
      assert.ok(out.url.startsWith(`${base}/FHIR/R5/`), out.url);
      for (const r of await ndjson(out.url, es.token)) {
        assert.equal(r.resourceType, out.type);
        (byType[out.type] ??= []).push(r);
      }
    }
    assert.deepEqual(byType.Patient.map((p) => p.id), [String(patient.id)]);
    assert.deepEqual(byType.Group.map((g) => g.id), [String(study)]);
    assert.equal(byType.Observation.length, 5);
    for (const o of byType.Observation) {
      assert.equal(o.subject.reference, `Patient/${patient.id}`);
      assert.equal(o.code.coding[0].code, 'omh:heart-rate:2.0');
    }
  });

  it('exports the Patient level with @medplum/core, and a token of another client cannot read the job', async () => {
    const medplum = new MedplumClient({ baseUrl: `${base}/`, fhirUrlPath: 'FHIR/R5', fetch: (...args) => fetch(...args) });
    medplum.setAccessToken(rs.token);
    const manifest = await medplum.bulkExport('Patient', 'Observation', undefined, { pollStatusOnAccepted: true });
    const count = manifest.output.reduce((n, o) => n + o.count, 0);
    assert.equal(count, 5);
    // The same files are the RS384 client's: another client's token (the
    // ES384 one, acting for the same manager) is told they do not exist.
    const res = await fetch(manifest.output[0].url, { headers: { Authorization: `Bearer ${es.token}` } });
    assert.equal(res.status, 404);
  });
});

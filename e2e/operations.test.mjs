// Operations as operators and patients meet them: liveness and readiness of
// both programs, request ids, the audit trail read by the patient it is
// about (a practitioner's search of their observations, as a valid R5
// AuditEvent), and /metrics scraped after a scripted session, every series
// the exchange and the gateway promise found with samples.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  api, batchBundle, bearerToken, codeFlowTokens, env, fhir, formSignIn, heartRates, nativeObservation, omhDataPoint,
  ownPatient, tokenRequest,
} from './lib.mjs';
import { loadR5 } from './r5.mjs';

const base = env('EXCHANGE_URL');
const gateway = env('EXCHANGE_GATEWAY_URL');
const metricsToken = env('EXCHANGE_METRICS_TOKEN');

let manager;
let managerID;
let patient;

before(async () => {
  patient = await ownPatient('ops');
  manager = await bearerToken(patient.managerEmail);
  managerID = (await api('/users/profile', { token: manager })).json.id;
});

describe('health and readiness', () => {
  for (const [name, origin] of [['the exchange', base], ['the gateway', gateway]]) {
    it(`${name}: /health is live and /ready is ready`, async () => {
      const health = await fetch(`${origin}/health`);
      assert.equal(health.status, 200);
      assert.equal((await health.json()).status, 'ok');
      const ready = await fetch(`${origin}/ready`);
      const report = await ready.json();
      assert.equal(ready.status, 200, JSON.stringify(report));
      assert.ok(report.status === 'ready' || report.status === 'ok', JSON.stringify(report));
    });
  }

  it('every answer carries a request id: a valid one sent is kept, an invalid one replaced', async () => {
    const kept = await fetch(`${base}/FHIR/R5/metadata`, { headers: { 'X-Request-Id': 'e2e-trace.1:2_3' } });
    assert.equal(kept.headers.get('x-request-id'), 'e2e-trace.1:2_3');
    const replaced = await fetch(`${base}/FHIR/R5/metadata`, { headers: { 'X-Request-Id': 'forged" level=ERROR' } });
    assert.match(replaced.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
    assert.match((await fetch(`${gateway}/health`)).headers.get('x-request-id'), /^[0-9a-f]{32}$/);
  });
});

/** Polls a FHIR search until one of its entries passes the test (the audit trail is written in batches, every second). */
async function eventually(path, token, test) {
  for (let attempt = 0; attempt < 40; attempt++) {
    const res = await fhir(path, { token });
    assert.equal(res.status, 200, res.text);
    const found = (res.json.entry ?? []).map((e) => e.resource).find(test);
    if (found) return found;
    await new Promise((ok) => setTimeout(ok, 250));
  }
  assert.fail(`no entry of ${path} passed the test`);
}

describe('the audit trail, read by the patient it is about', () => {
  it("shows the patient a practitioner's search of their observations, as a valid R5 AuditEvent", async () => {
    const up = await fhir('/', { token: manager, method: 'POST', body: batchBundle(heartRates(patient.id, 3, 'audit')) });
    assert.deepEqual(up.json.entry.map((e) => e.response.status), ['201 Created', '201 Created', '201 Created']);
    const search = await fhir(`/Observation?patient=${patient.id}&code=omh:heart-rate:2.0`, { token: manager });
    assert.equal(search.json.entry.length, 3);

    const patientToken = await bearerToken(patient.email);
    const event = await eventually(`/AuditEvent?patient=${patient.id}&entity-type=Observation&action=E`, patientToken,
      (e) => e.agent[0].who.reference === `Practitioner/${managerID}`);
    assert.deepEqual(loadR5().validate(event).problems, [], JSON.stringify(event));
    assert.equal(event.code.coding[0].code, 'search-type');
    assert.equal(event.outcome.code.code, 'success');
    assert.equal(event.patient.reference, `Patient/${patient.id}`);
    const query = Buffer.from(event.entity.find((x) => x.query).query, 'base64').toString();
    assert.match(query, new RegExp(`patient=${patient.id}`));
    // The patient reads the event itself, and nothing about anyone else.
    assert.equal((await fhir(`/AuditEvent/${event.id}`, { token: patientToken })).status, 200);
    // A search naming another patient looks like one naming nobody: an empty page.
    const others = await fhir('/AuditEvent?patient=1', { token: patientToken });
    assert.equal(others.status, 200);
    assert.deepEqual(others.json.entry ?? [], []);
    const mine = await fhir('/AuditEvent?_count=100', { token: patientToken });
    for (const e of mine.json.entry ?? []) {
      assert.ok(e.resource.entity.some((x) => x.what?.reference === `Patient/${patient.id}`), `AuditEvent/${e.resource.id} is not about the patient`);
    }
    // Practitioners read no audit trail; nobody writes it.
    assert.equal((await fhir('/AuditEvent', { token: manager })).status, 403);
    const write = await fhir('/AuditEvent', { token: await bearerToken('admin@example.org'), method: 'POST', body: event });
    assert.equal(write.status, 405);
  });

  it("shows the patient a search of them and another as their own view: neither the other patient nor the query's values about them", async () => {
    const admin = await bearerToken('admin@example.org');
    const other = await api('/patients', { token: admin, method: 'POST', body: {
      email: `other-${Date.now()}@ops.example.net`, nameFamily: `Other${Date.now()}`, nameGiven: ['Pat'], birthDate: '1980-01-01', organizationIds: [patient.organizationId] } });
    assert.equal(other.status, 201, JSON.stringify(other.json));
    const up = await fhir('/', { token: manager, method: 'POST', body: batchBundle(heartRates(other.json.id, 1, 'audit-other')) });
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const both = await fhir(`/Observation?patient=${patient.id},${other.json.id}&code=omh:heart-rate:2.0`, { token: manager });
    assert.equal(both.status, 200);

    const patientToken = await bearerToken(patient.email);
    const event = await eventually(`/AuditEvent?patient=${patient.id}&action=E`, patientToken,
      (e) => Buffer.from(e.entity.find((x) => x.query)?.query ?? '', 'base64').toString().includes('redacted'));
    assert.deepEqual(loadR5().validate(event).problems, [], JSON.stringify(event));
    assert.equal(event.meta.security[0].code, 'REDACTED');
    assert.ok(!JSON.stringify(event).includes(`Patient/${other.json.id}"`), JSON.stringify(event));
    const query = new URLSearchParams(Buffer.from(event.entity.find((x) => x.query).query, 'base64').toString());
    assert.equal(query.get('patient'), `${patient.id},(redacted)`);
    assert.equal(query.get('code'), 'omh:heart-rate:2.0');
    // The superuser reads the same event whole.
    const whole = await fhir(`/AuditEvent/${event.id}`, { token: admin });
    const asked = new URLSearchParams(Buffer.from(whole.json.entity.find((x) => x.query).query, 'base64').toString());
    assert.equal(asked.get('patient'), `${patient.id},${other.json.id}`);
    assert.equal(whole.json.meta.security, undefined);
  });
});

/** The samples of a Prometheus text exposition: name, labels (as written) and value. */
function samples(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m) out.push({ name: m[1], labels: m[2] ?? '', value: Number(m[3]) });
  }
  return out;
}

async function scrape(origin) {
  assert.equal((await fetch(`${origin}/metrics`)).status, 401, `${origin}/metrics without the token`);
  const res = await fetch(`${origin}/metrics`, { headers: { Authorization: `Bearer ${metricsToken}` } });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/plain/);
  return samples(await res.text());
}

/** Asserts that a series has a sample above zero whose labels hold each of want. */
function assertSeries(all, name, ...want) {
  const found = all.filter((s) => s.name === name && want.every((w) => s.labels.includes(w)));
  assert.ok(found.some((s) => s.value > 0), `${name}${want.length ? ` with ${want.join(', ')}` : ''}: ${JSON.stringify(found)}`);
}

describe('metrics after a scripted session', () => {
  it('finds every series of the exchange and of the gateway with samples', { timeout: 120_000 }, async () => {
    const admin = await bearerToken('admin@example.org');
    // Ingest: one created, one refused (the patient never consented to body temperatures).
    const temperature = omhDataPoint(`ops-bt-${Date.now()}`, 'body-temperature', '4.0', {
      body_temperature: { value: 37.4, unit: 'C' }, effective_time_frame: { date_time: '2025-04-02T08:00:00Z' },
    });
    const refusedOne = nativeObservation({ patient: patient.id, device: 1, dataPoint: temperature, identifier: `ops-bt-${Date.now()}` });
    const ingest = await fhir('/', { token: manager, method: 'POST', body: batchBundle([...heartRates(patient.id, 1, 'metrics'), refusedOne]) });
    assert.deepEqual(ingest.json.entry.map((e) => e.response.status), ['201 Created', '403 Forbidden']);
    // An R4 import that loses a value (R5 has no Encounter.diagnosis.rank).
    const source = await api('/fhir_sources', { token: manager, method: 'POST', body: { patient: patient.id, label: 'Operations EHR' } });
    assert.equal(source.status, 201, JSON.stringify(source.json));
    const imported = await fetch(`${base}/fhir-import/R4/Encounter`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${manager}`, 'Content-Type': 'application/fhir+json', 'X-SERVICE-FHIR-Source-ID': String(source.json.id) },
      body: JSON.stringify({
        resourceType: 'Encounter', id: `ops-enc-${Date.now()}`, status: 'in-progress', class: { code: 'AMB' },
        diagnosis: [{ condition: { reference: 'Condition/c1' }, rank: 1 }],
      }),
    });
    assert.equal(imported.status, 200, await imported.clone().text());
    // Sign-ins and tokens: a code flow, a refresh, a refused code, wrong passwords until throttled
    // (from an address of its own, through the trusted loopback proxy).
    const { session } = await formSignIn(base, patient.email, patient.password);
    assert.ok(session, 'the patient signs in');
    const tokens = await codeFlowTokens(base, session);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.json));
    const refreshed = await tokenRequest(base, { grant_type: 'refresh_token', refresh_token: tokens.json.refresh_token });
    assert.equal(refreshed.status, 200, JSON.stringify(refreshed.json));
    const refused = await tokenRequest(base, { grant_type: 'authorization_code', code: 'not-a-code-0123456789', redirect_uri: env('MCP_OAUTH_REDIRECT_URI') });
    assert.equal(refused.json.error, 'invalid_grant');
    let throttled = false;
    for (let i = 0; i < 12 && !throttled; i++) {
      const { res } = await formSignIn(base, patient.email, 'not-the-password', { forwardedFor: '198.51.100.23' });
      throttled = res.status === 429;
    }
    assert.ok(throttled, 'wrong passwords from one address get throttled');
    // Searches racing for the embedded database's one slot (EMBEDDED_SEARCH_SLOTS=1 in e2e/run).
    let exchange;
    for (let round = 0; round < 5; round++) {
      const answers = await Promise.all(Array.from({ length: 12 }, () => fhir(`/Observation?patient=${patient.id}`, { token: admin })));
      for (const a of answers) assert.ok(a.status === 200 || a.status === 503, `a racing search: ${a.status}`);
      exchange = await scrape(base);
      if (exchange.some((s) => s.name === 'exchange_embedded_search_waits_total' && s.value > 0)) break;
    }
    // A tool call through the gateway, with the manager's exchange token.
    const mcp = new Client({ name: 'operations e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${gateway}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${manager}` } } }));
    const studies = await mcp.callTool({ name: 'count_studies', arguments: {} });
    assert.ok(!studies.isError, JSON.stringify(studies));
    await mcp.close();
    // The audit writer writes every second.
    for (let i = 0; i < 20 && !exchange.some((s) => s.name === 'exchange_audit_events_written_total' && s.value > 0); i++) {
      await new Promise((ok) => setTimeout(ok, 250));
      exchange = await scrape(base);
    }

    for (const [name, ...labels] of [
      ['exchange_http_requests_total', 'route="/FHIR/R5/:type"', 'status="2xx"'],
      ['exchange_http_request_duration_seconds_count', 'route="/api/v1/patients"'],
      ['exchange_fhir_observations_total', 'outcome="created"'],
      ['exchange_fhir_observations_total', 'outcome="forbidden"'],
      ['exchange_fhir_search_duration_seconds_count', 'type="Observation"', 'store="native"'],
      ['exchange_r4_import_entries_total', 'type="Encounter"'],
      ['exchange_r4_import_dropped_values_total', 'type="Encounter"'],
      ['exchange_oauth_tokens_issued_total', 'grant="authorization_code"'],
      ['exchange_oauth_tokens_issued_total', 'grant="refresh_token"'],
      ['exchange_oauth_token_refusals_total', 'error="invalid_grant"'],
      ['exchange_logins_total', 'outcome="success"'],
      ['exchange_logins_total', 'outcome="failure"'],
      ['exchange_logins_total', 'outcome="throttled"'],
      ['exchange_db_operation_duration_seconds_count', 'collection="observations"', 'operation="aggregate"'],
      ['exchange_embedded_search_waits_total'],
      ['exchange_embedded_search_wait_seconds_count'],
      ['exchange_audit_events_written_total'],
      ['go_goroutines'],
      ['process_cpu_seconds_total'],
    ]) {
      assertSeries(exchange, name, ...labels);
    }
    const gw = await scrape(gateway);
    for (const [name, ...labels] of [
      ['gateway_http_requests_total', 'route="/mcp"'],
      ['gateway_http_request_duration_seconds_count'],
      ['gateway_tool_calls_total', 'tool="count_studies"', 'outcome="ok"'],
      ['gateway_upstream_request_duration_seconds_count', 'endpoint="api"', 'status="2xx"'],
      ['go_goroutines'],
      ['process_resident_memory_bytes'],
    ]) {
      assertSeries(gw, name, ...labels);
    }
  });
});

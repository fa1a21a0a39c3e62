// Analysts' access: the real mongosh CLI (npm package mongosh) connects to
// the embedded database (FerretDB on the MongoDB wire protocol) while the
// service runs, reads the demo data, and pastes every mongosh query of the
// docs into it, on observations and imported resources this file sends over
// FHIR, checking that each runs as pasted and answers what it should.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { api, batchBundle, bearerToken, env, fhir, nativeObservation, omhDataPoint } from './lib.mjs';

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
 * The mongosh queries of the documentation: every `js mongosh` fenced block
 * of README.md and docs/*.md, one query per paragraph, named by its leading
 * `//` comment lines. A `js` block that reads `db.` without the tag would
 * escape this test, so it fails here.
 */
function docsQueries() {
  const root = new URL('../', import.meta.url);
  const files = ['README.md', ...readdirSync(new URL('docs/', root)).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const queries = [];
  for (const file of files) {
    const text = readFileSync(new URL(file, root), 'utf8');
    for (const [, info, body] of text.matchAll(/^```(\S*[^\n]*)\n([\s\S]*?)^```$/gm)) {
      const words = info.trim().split(/\s+/);
      if (!words.includes('mongosh')) {
        assert.ok(!(words[0] === 'js' && /\bdb\./.test(body)), `${file}: a js block reads db. without the mongosh tag:\n${body}`);
        continue;
      }
      for (const paragraph of body.trimEnd().split(/\n\s*\n/)) {
        const lines = paragraph.split('\n');
        const title = lines.filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/\s*/, '')).join(' ');
        const code = lines.filter((l) => !l.startsWith('//')).join('\n');
        assert.ok(title && code.trim(), `${file}: each mongosh query has a // comment and code:\n${paragraph}`);
        queries.push({ file, title, code });
      }
    }
  }
  return queries;
}

/** Runs mongosh with script on its standard input, as if typed or pasted. */
function mongoshStdin(script) {
  return new Promise((resolve, reject) => {
    const child = execFile(mongosh, [uri, '--quiet', '--norc'], { timeout: 120_000, env: { ...process.env, NO_COLOR: '1' } },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout + stderr)));
    child.stdin.end(script);
  });
}

/**
 * Pastes the queries into one mongosh shell (one start-up, about 2 s,
 * instead of one each), as a reader pastes them: line by line into the
 * shell, which runs a line as soon as it is a whole statement. Each query is
 * pasted as the value of a variable (`var q = <its text>`, which runs when
 * and only when its text would) and followed by a line that prints that
 * value as relaxed Extended JSON. Returns, per query, its value and what
 * else the shell printed while it was pasted: an error, or a line the shell
 * ran on its own.
 */
async function pasteQueries(queries) {
  const marker = '@@query';
  const script = queries
    .map(({ code }, i) => `var __q = ${code}
print(${JSON.stringify(`${marker}${i} `)} + (EJSON.stringify(typeof __q?.toArray === 'function' ? __q.toArray() : __q) ?? "undefined")); var __q = undefined
`)
    .join('');
  const out = await mongoshStdin(script);
  const results = [];
  let noise = [];
  for (const line of out.split('\n')) {
    const text = line.replace(/^(?:\S+> )+/, '').replace(/^(?:\.\.\. ?)+/, '').trim();
    const m = text.match(new RegExp(`^${marker}(\\d+) (.*)$`));
    if (m) {
      results[Number(m[1])] = { value: m[2] === 'undefined' ? undefined : JSON.parse(m[2]), noise: noise.join('\n') };
      noise = [];
    } else if (text) {
      noise.push(text);
    }
  }
  return results;
}

const date = (iso) => ({ $date: iso });
/** An instant as relaxed Extended JSON shows a date: `{$date: "2025-03-06T02:30:00Z"}`. */
const utc = (local) => date(new Date(local).toISOString().replace('.000Z', 'Z'));

/**
 * A device's local time `daysAgo` days before today (today where the
 * device is), at `hhmm` in the UTC offset `offset`: the queries ask for the
 * last days, so the data is placed relative to now.
 */
function localTime(daysAgo, hhmm, offset = '-08:00') {
  const [hours, minutes] = offset.slice(1).split(':').map(Number);
  const offsetMs = (offset[0] === '-' ? -1 : 1) * (hours * 60 + minutes) * 60_000;
  const wall = new Date(Date.now() + offsetMs); // the device's wall clock, in UTC fields
  const day = new Date(Date.UTC(wall.getUTCFullYear(), wall.getUTCMonth(), wall.getUTCDate() - daysAgo));
  return `${day.toISOString().slice(0, 10)}T${hhmm}:00${offset}`;
}

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
const times = {
  hr1: localTime(40, '07:00'),
  hr2: localTime(10, '07:00'),
  hr3: localTime(5, '18:30'),
  hr4: localTime(3, '07:00', '-07:00'),
  hr5: localTime(1, '20:00', '-07:00'), // the next day in UTC
  bw1: localTime(10, '06:45'),
  bw2: localTime(2, '06:50', '-07:00'),
  stepsStart: localTime(4, '00:00'),
  stepsEnd: localTime(3, '00:00'),
};
const stepCount = omhDataPoint('analyst-steps-1', 'step-count', '3.0', {
  step_count: { value: 9120, unit: 'steps' },
  effective_time_frame: { time_interval: { start_date_time: times.stepsStart, end_date_time: times.stepsEnd } },
});
const uploads = [
  heartRate('analyst-hr-1', times.hr1, 66),
  heartRate('analyst-hr-2', times.hr2, 64),
  heartRate('analyst-hr-3', times.hr3, 118),
  heartRate('analyst-hr-4', times.hr4, 104),
  heartRate('analyst-hr-5', times.hr5, 71),
  bodyWeight('analyst-bw-1', times.bw1, 88.2),
  bodyWeight('analyst-bw-2', times.bw2, 87.6),
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

/**
 * What each query of the docs must answer, by its comment: a value, or a
 * function that checks the answer (for the audit trail, which every other
 * test file writes to as well).
 */
const expected = {
  'The patients of organization 7: name and birth date': [
    { _id: 4, name: { family: 'Flores', given: ['Daniel'] }, birthDate: '1965-01-20' },
  ],
  'Consents given in study 1, one per patient and data type': 11,
  "The demo patients' logins": 4,
  'Heart rates above 100 beats/min of patient 4, oldest first': [
    { effectiveStart: utc(times.hr3), omh: { body: { heart_rate: { value: 118 } } } },
    { effectiveStart: utc(times.hr4), omh: { body: { heart_rate: { value: 104 } } } },
  ],
  'Observations per code of the patients enrolled in study 4 (the patient ids first: no $lookup)': [
    { _id: 'omh:body-weight:3.0', observations: 2 },
    { _id: 'omh:heart-rate:2.0', observations: 5 },
    { _id: 'omh:step-count:3.0', observations: 1 },
  ],
  "Patient 4's observations of the last 7 days, oldest first": [
    { code: 'omh:heart-rate:2.0', effective: { dateTime: times.hr3 }, effectiveStart: utc(times.hr3) },
    { code: 'omh:step-count:3.0', effective: { start: times.stepsStart, end: times.stepsEnd }, effectiveStart: utc(times.stepsStart) },
    { code: 'omh:heart-rate:2.0', effective: { dateTime: times.hr4 }, effectiveStart: utc(times.hr4) },
    { code: 'omh:body-weight:3.0', effective: { dateTime: times.bw2 }, effectiveStart: utc(times.bw2) },
    { code: 'omh:heart-rate:2.0', effective: { dateTime: times.hr5 }, effectiveStart: utc(times.hr5) },
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
  // The lab result's read by outsider@example.org (before) is among them.
  "Who read or searched patient 4's data in the last 30 days, newest first": (events) => {
    assert.ok(Array.isArray(events) && events.length > 0, JSON.stringify(events));
    for (const e of events) assert.ok(['read', 'search-type'].includes(e.kind), JSON.stringify(e));
    const stamps = events.map((e) => e.lastUpdated.$date);
    assert.deepEqual(stamps, [...stamps].sort().reverse(), 'newest first');
    assert.ok(events.some((e) => e.kind === 'read' && e.agent === analystReader), `no read by ${analystReader}: ${JSON.stringify(events)}`);
  },
  // Alice's search of patient 4's heart rates (before) was refused.
  'Refusals per user in the last day (someone probing what they may not read)': (rows) => {
    assert.ok(Array.isArray(rows), JSON.stringify(rows));
    const counts = rows.map((r) => r.refusals);
    assert.deepEqual(counts, [...counts].sort((a, b) => b - a), 'most refusals first');
    assert.ok(rows.some((r) => r._id === 'Patient/1' && r.refusals >= 1), JSON.stringify(rows));
  },
};

/** The audit agent of outsider@example.org, who reads the lab result. */
let analystReader;

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

describe("the docs' mongosh queries, pasted into mongosh, on observations uploaded and resources imported over FHIR", () => {
  const queries = docsQueries();
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
    analystReader = `Practitioner/${(await api('/users/profile', { token })).json.id}`;
    // A search the audit trail records as refused: alice may not see patient 4.
    const probe = await fhir(`/Observation?patient=${analystPatient}&code=omh:heart-rate:2.0`, { token: await bearerToken('alice@example.org') });
    assert.equal(probe.json.total ?? probe.json.entry?.length ?? 0, 0);
    await new Promise((r) => setTimeout(r, 2_000)); // the audit trail is written within a second
    results = await pasteQueries(queries);
  }, { timeout: 120_000 });

  it('every expected answer names a query of the docs', () => {
    const titles = new Set(queries.map((q) => q.title));
    assert.deepEqual(Object.keys(expected).filter((title) => !titles.has(title)), []);
  });

  queries.forEach(({ file, title }, i) => {
    it(`${file}: ${title}`, () => {
      assert.ok(results[i], 'the shell printed no answer: was the query pasted whole?');
      assert.equal(results[i].noise, '', 'pasted into mongosh, the query made the shell print more than its answer');
      const want = expected[title];
      if (typeof want === 'function') want(results[i].value);
      else if (title in expected) assert.deepEqual(results[i].value, want);
    });
  });
});

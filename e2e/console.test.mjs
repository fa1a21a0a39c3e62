// The web console as its users meet it, in headless Chromium: a manager
// sets up a study with two scopes, creates a patient and invites them; the
// patient accepts the invitation (chooses a password), signs in and
// consents to one of the two scopes; an app uploads observations of both
// codes over FHIR; the manager sees one chart in the study view and two in
// the patient view; a viewer is offered no write control and a forced
// form post is refused; a patient cannot open another patient's page. A
// refused form keeps what was typed, the invitation ends on a sign-in with
// the email filled in, the data page reads on a phone and its downloads
// hold the range on screen.
// axe-core checks every page of the journey (no serious or critical
// violation), no page breaks its Content-Security-Policy, and each page is
// photographed into e2e/.artifacts/console/.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { artifactsDir, axeViolations, batchBundle, bearerToken, env, fhir, launchChromium, nativeObservation, omhDataPoint } from './lib.mjs';

const base = env('EXCHANGE_URL');
const password = 'exchange-demo-password';
const shots = join(artifactsDir(), 'console');
rmSync(shots, { recursive: true, force: true });
mkdirSync(shots, { recursive: true });

// The journey happens in an organization of its own, made through the
// admin API by the superuser: it adds a study, a patient and logins that
// the other files' counts of the seeded data must not see (and its emails
// are not @example.org, the demo users' domain). Only the catalogue's
// data source is shared.
const run = Date.now().toString(36);
const clinic = `Console Pilot Clinic ${run}`;
const manager = `manager-${run}@console.example.net`;
const viewer = `viewer-${run}@console.example.net`;
const companionStudy = `Activity Companion ${run}`; // requests step count, which the patient shares
const fitnessTracker = 'Fitness Tracker';

let browser;
/** Pages checked by axe, by name: the number of serious or critical violations. */
const audited = new Map();
/** CSP violations reported by any page of the journey. */
const cspViolations = [];

/** An admin API call as the superuser; the parsed answer. */
async function api(token, method, path, body) {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

before(async () => {
  browser = await launchChromium();
  console.log(`console screenshots: ${shots}`);
  const token = await bearerToken('admin@example.org');
  const org = await api(token, 'POST', '/organizations', { name: clinic, type: 'prov' });
  for (const [email, role] of [[manager, 'manager'], [viewer, 'viewer']]) {
    await api(token, 'POST', '/practitioners', { email, password, firstName: role === 'manager' ? 'Mona' : 'Vic', lastName: 'Pilot',
      organizationId: org.id, role });
  }
  const study = await api(token, 'POST', '/studies', { organizationId: org.id, name: companionStudy, description: 'Steps from a companion app.' });
  await api(token, 'POST', `/studies/${study.id}/scope_requests`, { codingSystem: 'https://w3id.org/openmhealth', codingCode: 'omh:step-count:3.0' });
});

after(async () => {
  await browser?.close();
});

/** A fresh browser context (its own cookies) and page. */
async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  page.on('console', (msg) => {
    if (/Content.Security.Policy|Refused to/i.test(msg.text())) cspViolations.push(`${page.url()}: ${msg.text()}`);
  });
  return page;
}

/** Checks the page with axe-core and photographs it. */
async function audit(page, name) {
  const serious = await axeViolations(page);
  audited.set(name, serious.length);
  await page.screenshot({ path: join(shots, `${String(audited.size).padStart(2, '0')}-${name}.png`), fullPage: true });
  assert.deepEqual(serious, [], `axe on ${name} (${page.url()})`);
}

/** Signs in on the exchange's login page, reached from a console page. */
async function signIn(page, email, pass = password) {
  await page.goto(`${base}/console/`);
  await page.waitForURL(/\/o\/login\//);
  await page.getByLabel('Email address').fill(email);
  await page.getByLabel('Password').fill(pass);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.waitForURL(`${base}/console/`);
}

/** The id at the end of a console URL such as /console/patients/7/. */
function idOf(url, kind) {
  const m = new URL(url).pathname.match(new RegExp(`/console/${kind}/(\\d+)/`));
  assert.ok(m, `no ${kind} id in ${url}`);
  return Number(m[1]);
}

/** The charts (SVG images) a data page shows, by accessible name. */
async function charts(page) {
  return page.locator('svg.chart title[id]').allTextContents();
}

describe('web console', () => {
  let studyId;
  let patientId;
  let invitationLink;
  const patientEmail = `eve-${run}@console.example.net`;
  const patientPassword = 'eve-chooses-a-long-password';
  const studyName = `Home Activity Pilot ${run}`;

  it('a manager creates a study with two scopes, creates a patient and invites them', async () => {
    const page = await newPage();
    await signIn(page, manager);
    await audit(page, 'manager-home');

    await page.getByRole('link', { name: 'Studies', exact: true }).click();
    await page.getByLabel('Name').fill(studyName);
    await page.getByLabel('Description').fill('Heart rate and steps at home.');
    await page.getByLabel('Organization').selectOption({ label: clinic });
    await page.getByRole('button', { name: 'Create study' }).click();
    await page.waitForURL(/\/console\/studies\/\d+\/\?done=created/);
    studyId = idOf(page.url(), 'studies');
    for (const scope of ['Heart rate', 'Step count']) {
      await page.getByLabel('Request', { exact: true }).selectOption({ label: scope });
      await page.getByRole('button', { name: 'Add', exact: true }).first().click();
      await page.waitForURL(/done=added/);
    }
    await page.getByLabel('Collect from', { exact: true }).selectOption({ label: fitnessTracker });
    await page.locator('form[action$="/data-sources"] button').click();
    await page.waitForURL(/done=added/);
    const requested = page.locator('section[aria-labelledby="scopes-h"] > ul').first();
    await assert.doesNotReject(requested.getByText('Heart rate').waitFor());
    await assert.doesNotReject(requested.getByText('Step count').waitFor());
    await audit(page, 'study-setup');

    await page.getByRole('link', { name: 'Patients', exact: true }).click();
    await audit(page, 'patients');
    await page.getByLabel('Given names').fill('Eve');
    await page.getByLabel('Family name').fill(`Example ${run}`);
    await page.getByLabel('Birth date').fill('1988-04-02');
    await page.getByLabel('Email address').fill(manager); // taken: refused, and nothing typed is lost
    await page.getByLabel('System').fill('http://hospital.example.org/mrn');
    await page.getByLabel('Value').fill(`MRN-${run}`);
    await page.getByLabel('Organization').selectOption({ label: clinic });
    const [refused] = await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST'), page.getByRole('button', { name: 'Create patient' }).click()]);
    assert.equal(refused.status(), 409);
    await page.waitForLoadState();
    assert.match(await page.getByRole('alert').innerText(), /already exists/);
    assert.equal(await page.getByLabel('Email address').getAttribute('aria-invalid'), 'true');
    assert.equal(await page.getByLabel('Family name').inputValue(), `Example ${run}`);
    assert.equal(await page.getByLabel('Value').inputValue(), `MRN-${run}`);
    await audit(page, 'patient-refused');
    await page.getByLabel('Email address').fill(patientEmail);
    await page.getByRole('button', { name: 'Create patient' }).click();
    await page.waitForURL(/\/console\/patients\/\d+\/\?done=created/);
    patientId = idOf(page.url(), 'patients');

    // Enroll in the new study, and in the companion study that requests step count.
    for (const name of [studyName, companionStudy]) {
      await page.goto(`${base}/console/studies/`);
      await page.getByRole('link', { name, exact: true }).click();
      await page.getByLabel('Enroll', { exact: true }).selectOption({ label: `Eve Example ${run} (1988-04-02)` });
      await page.getByRole('button', { name: 'Enroll', exact: true }).click();
      await page.waitForURL(/done=enrolled/);
    }
    const states = page.getByRole('row', { name: new RegExp(`Eve Example ${run}`) });
    assert.match(await states.innerText(), /pending/);

    await page.goto(`${base}/console/patients/${patientId}/`);
    await page.getByRole('button', { name: 'Invite' }).click();
    invitationLink = (await page.locator('#invitation-link').innerText()).trim();
    assert.match(invitationLink, new RegExp(`^${base}/console/invitation/\\?code=`));
    assert.equal(await page.locator('svg.qr').count(), 1, 'the QR code of the link');
    await audit(page, 'patient-invitation');
    await page.context().close();
  });

  it('the patient accepts the invitation, signs in and consents to one scope', async () => {
    const page = await newPage();
    await page.goto(invitationLink);
    await assert.doesNotReject(page.getByText(patientEmail).first().waitFor());
    await audit(page, 'invitation-accept');
    await page.getByLabel('New password').fill(patientPassword);
    await page.getByLabel('The same password again').fill(patientPassword);
    await page.getByRole('button', { name: 'Set password and continue' }).click();
    // A confirmation, with the email filled in: the patient types only the password.
    await page.getByRole('heading', { name: 'Your password is set' }).waitFor();
    assert.equal(await page.getByLabel('Email address').inputValue(), patientEmail);
    await audit(page, 'password-set');
    await page.getByLabel('Password').fill(patientPassword);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.waitForURL(`${base}/console/`);
    await audit(page, 'patient-consent-requests');

    const answer = async (study, scope, choice) => {
      const form = page.locator('form.scope').filter({ has: page.getByRole('group', { name: `May ${study} see your ${scope} data?` }) });
      await form.getByLabel(choice).check();
      await form.getByRole('button').click();
      await page.waitForURL(/done=answered/);
    };
    await answer(studyName, 'Heart rate', 'Yes, share my Heart rate data');
    await answer(studyName, 'Step count', 'No, do not share it');
    await answer(companionStudy, 'Step count', 'Yes, share my Step count data');
    const mine = page.locator('section[aria-labelledby="mine-h"]');
    assert.match(await mine.innerText(), /Heart rate: given you share it/);
    assert.match(await mine.innerText(), /Step count: refused you do not share it/);
    await audit(page, 'patient-home');

    // Another patient's page is answered as a patient that does not exist, as the API answers it.
    const other = await page.goto(`${base}/console/patients/1/`);
    assert.equal(other.status(), 404);
    await page.context().close();
  });

  it('an app uploads observations of both codes over FHIR', async () => {
    const token = await bearerToken(manager);
    const sources = await (await fetch(`${base}/api/v1/data_sources?pageSize=100`, { headers: { Authorization: `Bearer ${token}` } })).json();
    const device = sources.results.find((d) => d.name === fitnessTracker).id;
    const day = (n) => new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
    const observations = [];
    for (let i = 1; i <= 5; i++) {
      observations.push(nativeObservation({ patient: patientId, device, identifier: `console-hr-${run}-${i}`,
        dataPoint: omhDataPoint(`console-hr-${run}-${i}`, 'heart-rate', '2.0', {
          heart_rate: { value: 64 + i * 3, unit: 'beats/min' }, effective_time_frame: { date_time: `${day(i)}T08:00:00Z` } }) }));
      observations.push(nativeObservation({ patient: patientId, device, identifier: `console-steps-${run}-${i}`,
        dataPoint: omhDataPoint(`console-steps-${run}-${i}`, 'step-count', '3.0', {
          step_count: { value: 4000 + i * 900, unit: 'steps' },
          effective_time_frame: { time_interval: { start_date_time: `${day(i)}T00:00:00Z`, end_date_time: `${day(i)}T23:59:59Z` } } }) }));
    }
    const { status, json } = await fhir('', { token, method: 'POST', body: batchBundle(observations) });
    assert.equal(status, 200);
    assert.deepEqual(json.entry.map((e) => e.response.status), observations.map(() => '201 Created'));
  });

  it('the manager sees one chart in the study view and two in the patient view', async () => {
    const page = await newPage();
    await signIn(page, manager);
    await page.goto(`${base}/console/studies/${studyId}/`);
    const row = page.getByRole('row', { name: new RegExp(`Eve Example ${run}`) });
    assert.match(await row.innerText(), /given[\s\S]*refused/);
    await audit(page, 'study-consents');
    await row.getByRole('link', { name: /Data in this study/ }).click();
    await page.waitForURL(/\/data$/);
    assert.deepEqual(await charts(page), ['Heart rate']);
    assert.equal(await page.locator('svg.chart circle title').count(), 5, 'a <title> per point');
    await audit(page, 'study-data');

    await page.goto(`${base}/console/patients/${patientId}/data`);
    assert.deepEqual(await charts(page), ['Heart rate', 'Step count']);
    assert.equal(await page.locator('svg.chart rect title').count(), 5, "a bar per day's steps, with its value");
    await audit(page, 'patient-data');
    // A phone shows the same page in one column, its charts as wide as the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    const chart = await page.locator('svg.chart').first().boundingBox();
    assert.ok(chart.width > 300, `a chart ${chart.width} px wide on a phone`);
    await audit(page, 'patient-data-phone');
    await page.setViewportSize({ width: 1200, height: 800 });
    // The download links carry the range on screen.
    await page.getByLabel('From').fill(new Date(Date.now() - 2.5 * 86_400_000).toISOString().slice(0, 10));
    await page.getByRole('button', { name: 'Show' }).click();
    await page.waitForURL(/from=/);
    const shown = await page.locator('td.num').count();
    const link = await page.getByRole('link', { name: 'FHIR NDJSON' }).getAttribute('href');
    const ranged = (await (await page.request.get(`${base}${link}`)).text()).trim().split('\n');
    assert.ok(shown > 0 && shown < 10, `${shown} values shown in the narrowed range`);
    assert.equal(ranged.length, shown, `the NDJSON of ${link} holds what the page shows`);
    // The downloads hold what the page shows.
    const ndjson = await page.request.get(`${base}/console/patients/${patientId}/data.ndjson`);
    assert.equal(ndjson.status(), 200);
    const lines = (await ndjson.text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.length, 10);
    assert.ok(lines.every((o) => o.resourceType === 'Observation' && o.subject.reference === `Patient/${patientId}`));
    const csv = await (await page.request.get(`${base}/console/studies/${studyId}/patients/${patientId}/data.csv`)).text();
    assert.match(csv, /^observation,code,effective_start,effective_end,field,value/);
    assert.doesNotMatch(csv, /step-count/, 'the study download holds only the consented code');
    await page.context().close();
  });

  it('a study edit from a page opened before another edit is refused, not saved over it', async () => {
    const first = await newPage();
    await signIn(first, manager);
    await first.goto(`${base}/console/studies/${studyId}/`);
    const second = await first.context().newPage();
    await second.goto(`${base}/console/studies/${studyId}/`);
    await first.getByLabel('Description').fill('Edited in the first tab.');
    await first.getByRole('button', { name: 'Save' }).click();
    await first.waitForURL(/saved/);
    await second.getByLabel('Description').fill('Edited in the second tab.');
    const [answer] = await Promise.all([second.waitForResponse((r) => r.request().method() === 'POST'), second.getByRole('button', { name: 'Save' }).click()]);
    assert.equal(answer.status(), 409);
    assert.match(await second.getByRole('alert').innerText(), /changed by someone else since you opened it[\s\S]*Edited in the second tab\./);
    assert.equal(await second.getByLabel('Description').inputValue(), 'Edited in the first tab.', 'the form shows the current study');
    await audit(second, 'study-conflict');
    await first.context().close();
  });

  it('a viewer is offered no write control, and a forced post is refused', async () => {
    const page = await newPage();
    await signIn(page, viewer);
    await page.goto(`${base}/console/studies/${studyId}/`);
    const forms = await page.locator('form[method="post"]').evaluateAll((fs) => fs.map((f) => f.getAttribute('action')));
    // Starting an export reads the study, so a viewer may; nothing else posts.
    assert.deepEqual(forms, ['/o/logout/', `/console/studies/${studyId}/export`], 'only sign-out and export');
    await audit(page, 'viewer-study');
    const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
    const forced = await page.request.post(`${base}/console/studies/${studyId}/enroll`, { form: { csrf_token: csrf, patient: String(patientId) } });
    assert.equal(forced.status(), 403);
    await page.context().close();
  });

  it('every page of the journey passes axe and its Content-Security-Policy', () => {
    console.log(`axe-core: ${audited.size} pages, serious or critical violations: ${[...audited.values()].reduce((a, b) => a + b, 0)}`);
    assert.ok(audited.size >= 12, `${audited.size} pages audited`);
    assert.deepEqual(cspViolations, []);
  });
});

// Shared settings and helpers of the end-to-end tests. e2e/run sets the
// environment; each value is required so a test never runs against a guess.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite with e2e/run`);
  return v;
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/**
 * The serious and critical axe-core violations of the page (WCAG 2.x A and
 * AA rules and best practices), one line each. axe is evaluated through the
 * DevTools protocol, which the page's CSP does not govern, so the page keeps
 * its real policy.
 */
export async function axeViolations(page) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() =>
    window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } }),
  );
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
}

/** Directory for screenshots and logs that humans look at (gitignored). */
export function artifactsDir() {
  const dir = fileURLToPath(new URL('.artifacts/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  return dir;
}

// ---- Secrets and data values, for the log scan (log-scan.mjs) -------------

/**
 * Records values that must never appear in the service's or the gateway's
 * logs (tokens, codes, cookies, passwords, uploaded data) in
 * $EXCHANGE_SECRETS_FILE, one JSON string per line. Values shorter than 8
 * characters are left out: they would match by chance.
 */
export function remember(...values) {
  const file = process.env.EXCHANGE_SECRETS_FILE;
  if (!file) return;
  for (const v of values) {
    if (typeof v === 'string' && v.length >= 8) appendFileSync(file, `${JSON.stringify(v)}\n`);
  }
}

/** The secret fields of OAuth requests and answers. */
const secretFields = ['access_token', 'refresh_token', 'id_token', 'code', 'password', 'client_secret', 'code_verifier', 'token'];

/** Remembers the secrets a request's form or JSON body carries. */
function rememberBody(body) {
  if (typeof body !== 'string' && !(body instanceof URLSearchParams)) return;
  const text = body.toString();
  try {
    const form = new URLSearchParams(text);
    for (const f of secretFields) remember(form.get(f));
  } catch {}
}

/** Remembers what an answer hands out: cookies, a code in a redirect. */
function rememberHeaders(headers) {
  for (const c of headers.getSetCookie?.() ?? []) remember(c.split(';')[0].split('=').slice(1).join('='));
  const location = headers.get('location');
  if (location) {
    try {
      const u = new URL(location, 'http://x');
      remember(u.searchParams.get('code'));
    } catch {}
  }
}

// Every fetch of the tests (openid-client's and the MCP SDK's included)
// passes here: bearer tokens sent, secrets in form bodies, cookies and codes
// handed out, and the tokens of token endpoint answers are remembered.
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  const auth = headers.get('authorization');
  if (auth?.startsWith('Bearer ')) remember(auth.slice(7));
  rememberBody(init.body);
  const res = await realFetch(input, init);
  rememberHeaders(res.headers);
  const url = new URL(input instanceof Request ? input.url : String(input));
  if (/\/token\/?$/.test(url.pathname) && (res.headers.get('content-type') ?? '').includes('json')) {
    try {
      const body = await res.clone().json();
      for (const f of secretFields) remember(body[f]);
    } catch {}
  }
  return res;
};

// ---- Sign-in without a browser ----------------------------------------------

/**
 * Signs in at an exchange's login page (base: its origin) with an email and
 * password, as a browser form post does (the CSRF cookie and field are the
 * same random value), from the client address forwardedFor when given (the
 * exchange trusts e2e/run's loopback proxy). Returns the response, and the
 * login session cookie when the sign-in succeeded.
 */
export async function formSignIn(base, email, password, { forwardedFor } = {}) {
  const csrf = randomBytes(24).toString('hex');
  const headers = { 'Content-Type': 'application/x-www-form-urlencoded', Cookie: `exchange_csrf=${csrf}` };
  if (forwardedFor) headers['X-Forwarded-For'] = forwardedFor;
  remember(password);
  const res = await fetch(`${base}/o/login/`, {
    method: 'POST',
    redirect: 'manual',
    headers,
    body: new URLSearchParams({ csrf_token: csrf, email, password, next: '' }),
  });
  const session = res.headers.getSetCookie().map((c) => c.split(';')[0]).find((c) => c.startsWith('exchange_session='));
  return { res, session };
}

/**
 * Runs the authorization code flow of the gateway's client (confidential,
 * trusted: no consent page; e2e/run's MCP_OAUTH_CLIENT_ID and _SECRET) at
 * an exchange for a signed-in session, and redeems the code there. Returns
 * the token endpoint's answer.
 */
export async function codeFlowTokens(base, session) {
  const clientId = env('MCP_OAUTH_CLIENT_ID');
  const redirectUri = env('MCP_OAUTH_REDIRECT_URI');
  const verifier = randomBytes(32).toString('base64url');
  const { createHash } = await import('node:crypto');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const authorize = new URL(`${base}/o/authorize/`);
  authorize.search = new URLSearchParams({
    response_type: 'code', client_id: clientId, redirect_uri: redirectUri,
    scope: 'openid profile email offline_access fhirUser user/*.rs exchange/admin.read', // what the client is registered for
    state: randomBytes(12).toString('hex'), code_challenge: challenge, code_challenge_method: 'S256',
  }).toString();
  const res = await fetch(authorize, { redirect: 'manual', headers: { Cookie: session } });
  const location = res.headers.get('location');
  if (res.status !== 302 && res.status !== 303) throw new Error(`authorize: ${res.status} ${await res.text()}`);
  const code = new URL(location).searchParams.get('code');
  if (!code) throw new Error(`authorize redirected to ${location}`);
  return tokenRequest(base, { grant_type: 'authorization_code', code, redirect_uri: redirectUri, code_verifier: verifier });
}

/** A token endpoint request as the gateway's client (HTTP Basic). */
export async function tokenRequest(base, form) {
  const basic = Buffer.from(`${encodeURIComponent(env('MCP_OAUTH_CLIENT_ID'))}:${encodeURIComponent(env('MCP_OAUTH_CLIENT_SECRET'))}`).toString('base64');
  const res = await fetch(`${base}/o/token/`, {
    method: 'POST',
    headers: { Authorization: `Basic ${basic}`, 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
    body: new URLSearchParams(form),
  });
  return { status: res.status, json: await res.json() };
}

/** Chromium flags that keep it quiet on a closed network. */
const chromiumArgs = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Headless Chromium ($CHROMIUM, default /usr/bin/chromium) through
 * playwright-core, loaded here so only the browser tests pay for it.
 */
export async function launchChromium() {
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: chromiumArgs,
    timeout: 60_000,
  });
  // What the browser is handed (cookies, codes in redirects) is
  // remembered for the log scan, as fetch's is.
  const newContext = browser.newContext.bind(browser);
  browser.newContext = async (...args) => {
    const context = await newContext(...args);
    context.on('response', async (r) => {
      try {
        rememberHeaders(new Headers(await r.allHeaders()));
      } catch {}
    });
    context.on('request', (r) => {
      try {
        remember(new URL(r.url()).searchParams.get('code'));
        rememberBody(r.postData() ?? undefined);
      } catch {}
    });
    return context;
  };
  return browser;
}

/**
 * A new browser context and page. Requests to redirectUri (where nothing
 * listens) are answered with a small page; every such request is recorded
 * in callbacks.
 */
export async function newCallbackPage(browser, redirectUri) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  const callbacks = [];
  page.on('request', (r) => {
    if (r.url().startsWith(redirectUri)) callbacks.push(r.url());
  });
  await page.route(`${redirectUri}**`, (route) =>
    route.fulfill({
      status: 200,
      contentType: 'text/html; charset=utf-8',
      body: '<!doctype html><title>e2e callback</title><p>Authorization response received.</p>',
    }),
  );
  return { context, page, callbacks };
}

/**
 * Resolves to the URL of the page's next request to redirectUri: the
 * authorization response. Listen before the action that leads there. (A
 * request event, not only page.route: Playwright does not route a redirect
 * that ends the navigation page.goto started.)
 */
export function waitForCallback(page, redirectUri) {
  return page
    .waitForRequest((r) => r.url().startsWith(redirectUri), { timeout: 20_000 })
    .then((r) => new URL(r.url()));
}

/** Fills in and submits the exchange's login page; resolves to the POST's response. */
export async function signIn(page, email, password) {
  await page.getByLabel('Email address').fill(email);
  await page.getByLabel('Password').fill(password);
  const [response] = await Promise.all([
    page.waitForResponse((r) => new URL(r.url()).pathname === '/o/login/' && r.request().method() === 'POST'),
    page.getByRole('button', { name: 'Sign in', exact: true }).click(),
  ]);
  return response;
}

/**
 * Runs `exchange <args>` against the running service's database (the
 * command inherits DATA_DIR and EMBEDDED_MONGO_ADDR from e2e/run) and
 * returns what it printed.
 */
export async function exchangeCommand(...args) {
  const { stdout } = await promisify(execFile)(env('EXCHANGE_BIN'), args, { timeout: 60_000 });
  return stdout;
}

/** A bearer access token for a demo login, from `exchange token create`. */
export async function bearerToken(email, ...flags) {
  const token = (await exchangeCommand('token', 'create', '--email', email, ...flags)).trim();
  if (!token) throw new Error(`exchange token create --email ${email} printed no token`);
  remember(token);
  return token;
}

/**
 * A request to the FHIR interface (a path under /FHIR/R5, or an absolute
 * URL such as a next link): the status, headers, body text and parsed JSON
 * body (undefined for an empty body). Extra headers override the defaults.
 */
export async function fhir(path, { token, method = 'GET', body, headers: extra = {} } = {}) {
  const url = /^https?:/.test(path) ? path : `${env('EXCHANGE_URL')}/FHIR/R5${path}`;
  const headers = { Accept: 'application/fhir+json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/fhir+json';
  Object.assign(headers, extra);
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    throw new Error(`${method} ${url}: ${res.status}, not JSON: ${text.slice(0, 300)}`);
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** An Open mHealth data point (header 1.0) of omh:<name>:<version>. */
export function omhDataPoint(id, name, version, body) {
  return {
    header: {
      id,
      creation_date_time: '2025-03-20T12:00:00Z',
      schema_id: { namespace: 'omh', name, version },
    },
    body,
  };
}

/**
 * A native Observation of a data point: coded to Open mHealth, the data
 * point Base64 in valueAttachment, with an identifier of its own.
 */
export function nativeObservation({ patient, device, dataPoint, identifier, status = 'final' }) {
  const { name, version } = dataPoint.header.schema_id;
  const data = Buffer.from(JSON.stringify(dataPoint)).toString('base64');
  remember(data, JSON.stringify(dataPoint.body));
  return {
    resourceType: 'Observation',
    identifier: [{ system: 'urn:exchange:e2e', value: identifier }],
    status,
    code: { coding: [{ system: 'https://w3id.org/openmhealth', code: `omh:${name}:${version}` }] },
    subject: { reference: `Patient/${patient}` },
    device: { reference: `Device/${device}` },
    valueAttachment: { contentType: 'application/json', data },
  };
}

/** A batch Bundle that POSTs each resource. */
export function batchBundle(resources) {
  return {
    resourceType: 'Bundle',
    type: 'batch',
    entry: resources.map((resource) => ({ request: { method: 'POST', url: resource.resourceType }, resource })),
  };
}

/** A request to the admin API: the status and the parsed JSON answer. */
export async function api(path, { token, method = 'GET', body, base = env('EXCHANGE_URL') } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${base}/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

/**
 * An organization of its own (as the console test has, so that no other
 * test's counts of the demo data change), with a manager and a patient
 * (emails at ops.example.net, not the demo's example.org) enrolled in a
 * study that requests heart rates, which the patient consented to share.
 * Returns the patient's id, email, password and names, the manager's email
 * (`exchange token create` makes their token) and the study's and
 * organization's ids. Names, emails and passwords are remembered for the
 * log scan.
 */
export async function ownPatient(label) {
  const admin = await bearerToken('admin@example.org');
  const run = `${label}-${randomBytes(4).toString('hex')}`;
  const family = `Quillfeather${randomBytes(3).toString('hex')}`;
  const given = `Ottoline${randomBytes(3).toString('hex')}`;
  const email = `${run}@ops.example.net`;
  const managerEmail = `manager-${run}@ops.example.net`;
  const password = `pw-${randomBytes(12).toString('hex')}`;
  remember(family, given, email, managerEmail, password);
  const step = async (path, body) => {
    const res = await api(path, { token: admin, method: 'POST', body });
    if (res.status >= 300) throw new Error(`set up ${run}: POST ${path}: ${res.status} ${JSON.stringify(res.json)}`);
    return res.json;
  };
  const org = await step('/organizations', { name: `Operations ${run}`, type: 'prov' });
  await step('/practitioners', { email: managerEmail, password, firstName: 'Opal', lastName: `Manager${randomBytes(3).toString('hex')}`,
    organizationId: org.id, role: 'manager' });
  const patient = await step('/patients', { email, password, nameFamily: family, nameGiven: [given], birthDate: '1979-04-02', organizationIds: [org.id] });
  const study = await step('/studies', { organizationId: org.id, name: `Study ${run}`, description: 'operations e2e' });
  const heartRate = { codingSystem: 'https://w3id.org/openmhealth', codingCode: 'omh:heart-rate:2.0' };
  await step(`/studies/${study.id}/scope_requests`, heartRate);
  await step(`/studies/${study.id}/patients`, { patientIds: [patient.id] });
  await step(`/patients/${patient.id}/consents`, { studyScopeConsents: [{ studyId: study.id, scopeConsents: [{ ...heartRate, consented: true }] }] });
  return { id: patient.id, email, password, family, given, managerEmail, studyId: study.id, organizationId: org.id };
}

/** Heart rates of a patient from Device/1, as native Observations with identifiers of their own. */
export function heartRates(patient, n, label) {
  return Array.from({ length: n }, (_, i) => {
    const id = `${label}-${randomBytes(4).toString('hex')}-${i}`;
    const dataPoint = omhDataPoint(id, 'heart-rate', '2.0', {
      heart_rate: { value: 61 + i, unit: 'beats/min' },
      effective_time_frame: { date_time: `2025-04-0${1 + (i % 9)}T0${i % 10}:00:00Z` },
    });
    return nativeObservation({ patient, device: 1, dataPoint, identifier: id });
  });
}

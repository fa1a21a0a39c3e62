// Shared settings and helpers of the end-to-end tests. e2e/run sets the
// environment; each value is required so a test never runs against a guess.
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite with e2e/run`);
  return v;
}

/** Directory for screenshots and logs that humans look at (gitignored). */
export function artifactsDir() {
  const dir = fileURLToPath(new URL('.artifacts/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  return dir;
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
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: chromiumArgs,
    timeout: 60_000,
  });
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
    page.getByRole('button', { name: 'Sign in' }).click(),
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
  return {
    resourceType: 'Observation',
    identifier: [{ system: 'urn:exchange:e2e', value: identifier }],
    status,
    code: { coding: [{ system: 'https://w3id.org/openmhealth', code: `omh:${name}:${version}` }] },
    subject: { reference: `Patient/${patient}` },
    device: { reference: `Device/${device}` },
    valueAttachment: {
      contentType: 'application/json',
      data: Buffer.from(JSON.stringify(dataPoint)).toString('base64'),
    },
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

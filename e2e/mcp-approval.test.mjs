// The consent bypass of issue 11, tried as an attacker: anyone may register
// a client at the MCP gateway (DCR) with an https redirect URI of their own,
// and send its /authorize link to a user who is signed in at the exchange.
// Before the gateway had an approval page, the browser went through the
// exchange (which trusts the gateway's client and shows no consent) and
// delivered the user's code to the attacker without a page being shown.
// Here the victim's Chromium opens the link; every navigation to the
// attacker's host is intercepted with page.route, so nothing leaves the
// machine, and recorded, so the test sees what the attacker would receive.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { artifactsDir, axeViolations, env, launchChromium } from './lib.mjs';

const gateway = env('EXCHANGE_GATEWAY_URL');
const exchange = env('EXCHANGE_URL');
const attacker = 'https://attacker.example';
const callback = `${attacker}/cb`;
const otherCallback = `${attacker}/other`;
// The Cardiology viewer: no other file signs in as her.
const victim = { email: 'viewer@example.org', password: 'exchange-demo-password' };

let browser;
before(async () => {
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
});

/** The attacker's client: DCR with redirect URIs on the attacker's host. */
async function registerAttacker(name = 'Claude') {
  const res = await fetch(`${gateway}/register`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ client_name: name, redirect_uris: [callback, otherCallback], token_endpoint_auth_method: 'none' }),
  });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  return body.client_id;
}

/** An authorization link the attacker builds, with its own PKCE verifier. */
function attackerLink(clientId, redirectUri = callback) {
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(12).toString('base64url');
  const url = new URL(`${gateway}/authorize`);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: redirectUri,
    state,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
    resource: `${gateway}/mcp`,
  });
  return { href: url.href, verifier, state };
}

/** What reached the attacker's host. */
const reached = [];
/** The page the attacker's /frame page frames. */
let frameTarget = '';

/**
 * The victim: a browser signed in at the exchange. Navigations to the
 * attacker's host are answered locally and recorded.
 */
async function signedInVictim() {
  const context = await browser.newContext();
  context.on('request', (r) => {
    if (r.url().startsWith(`${attacker}/`)) reached.push(new URL(r.url()));
  });
  await context.route(`${attacker}/**`, (route) => {
    const frame = new URL(route.request().url()).pathname === '/frame';
    return route.fulfill({
      status: 200,
      contentType: 'text/html; charset=utf-8',
      body: frame ? `<!doctype html><title>prize</title><iframe src="${frameTarget}" width="800" height="600"></iframe>` : '<!doctype html><title>attacker</title>',
    });
  });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  await page.goto(`${exchange}/o/login/`);
  await page.getByLabel('Email address').fill(victim.email);
  await page.getByLabel('Password').fill(victim.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForLoadState();
  assert.ok((await page.content()).includes(victim.email), 'the victim is signed in at the exchange');
  return { context, page };
}

/**
 * Runs a step that ends at the attacker's host (path) and returns the URL
 * the browser arrived with. Chromium may first fail a redirect to a routed
 * https URL and then retry it, so the URL is read from the request and the
 * step settles only once the page is there.
 */
async function arrival(page, path, step) {
  const request = page.waitForRequest((r) => r.isNavigationRequest() && r.url().startsWith(`${attacker}${path}?`));
  await step().catch(() => {}); // a navigation that Chromium retries rejects
  const url = new URL((await request).url());
  await page.waitForURL((u) => u.origin === attacker && u.pathname === path);
  return url;
}

describe('MCP gateway approval page against a consent bypass', { concurrency: false }, () => {
  let victimBrowser, clientId;

  before(async () => {
    victimBrowser = await signedInVictim();
    clientId = await registerAttacker();
  });
  after(async () => {
    await victimBrowser?.context.close();
  });

  it('stops at the approval page: nothing reaches the attacker without a click', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    const link = attackerLink(clientId);
    const res = await page.goto(link.href).catch((e) => e);
    assert.deepEqual(reached.map(String), [], 'nothing reached the attacker');
    assert.equal(new URL(page.url()).origin, gateway, `the browser stayed at the gateway, not ${page.url()}`);
    assert.equal(res.status(), 200);
    await page.getByRole('heading', { level: 1, name: 'Allow “Claude” to read your data?' }).waitFor();
    assert.equal(await page.locator('.host').textContent(), 'attacker.example', 'the redirect host, in full');
    assert.match(await page.locator('main').textContent(), /Read-only/);
    assert.equal(await page.locator('html').getAttribute('lang'), 'en');
    assert.equal(await page.locator('script').count(), 0, 'no script');
    assert.match(res.headers()['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(res.headers()['x-frame-options'], 'DENY');
    assert.deepEqual(await axeViolations(page), [], 'axe-core: no serious or critical violation on the approval page');
    await page.screenshot({ path: join(artifactsDir(), 'mcp-approval-attacker.png'), fullPage: true });
  });

  it('cannot be framed for a clickjacking Allow', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    frameTarget = attackerLink(clientId).href;
    // The frame asks the gateway, whose answer forbids framing it
    // (frame-ancestors 'none', X-Frame-Options: DENY): Chromium shows an
    // error instead.
    const asked = page.waitForRequest((r) => r.url().startsWith(`${gateway}/authorize?`));
    await page.goto(`${attacker}/frame`);
    await asked;
    const frame = page.frames().find((f) => f !== page.mainFrame());
    assert.ok(frame, 'the attacker page has its frame');
    await frame.waitForLoadState('load');
    assert.match(frame.url(), /^chrome-error:/, 'Chromium refused to show the gateway in the frame');
    assert.equal(await frame.getByRole('button', { name: 'Allow' }).count(), 0, 'the approval page does not render in a frame');
    assert.ok(reached.every((u) => !u.searchParams.has('code')), 'no code reached the attacker');
  });

  it('Deny sends access_denied with the state to the registered redirect', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    const link = attackerLink(clientId);
    await page.goto(link.href);
    const back = await arrival(page, '/cb', () => page.getByRole('button', { name: 'Deny' }).click());
    assert.equal(back.searchParams.get('error'), 'access_denied');
    assert.equal(back.searchParams.get('state'), link.state);
    assert.ok(!back.searchParams.has('code'));
    assert.ok(reached.every((u) => !u.searchParams.has('code')), 'no code reached the attacker');
  });

  it('Allow completes the flow, and the code redeems at the gateway', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    const link = attackerLink(clientId);
    await page.goto(link.href);
    // Signed in at the exchange already: straight back with a code.
    const back = await arrival(page, '/cb', () => page.getByRole('button', { name: 'Allow' }).click());
    assert.equal(back.searchParams.get('state'), link.state);
    const code = back.searchParams.get('code');
    assert.ok(code, `a code in ${back}`);
    const res = await fetch(`${gateway}/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'authorization_code', client_id: clientId, code, code_verifier: link.verifier, redirect_uri: callback }),
    });
    const tokens = await res.json();
    assert.equal(res.status, 200, JSON.stringify(tokens));
    assert.ok(tokens.access_token);
  });

  it('remembers the approval for the same client and redirect URI', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    const link = attackerLink(clientId);
    const asked = [];
    const onResponse = (r) => {
      if (r.url().startsWith(`${gateway}/authorize`) && r.status() === 200) asked.push(r.url());
    };
    page.on('response', onResponse);
    try {
      const back = await arrival(page, '/cb', () => page.goto(link.href));
      assert.ok(back.searchParams.get('code'), 'a code without a page');
      assert.equal(back.searchParams.get('state'), link.state);
      assert.deepEqual(asked, [], 'no approval page was shown');
    } finally {
      page.off('response', onResponse);
    }
  });

  it('asks again for a new redirect URI, and for a new client', async () => {
    const { page } = victimBrowser;
    await page.goto('about:blank');
    const before = reached.length;
    await page.goto(attackerLink(clientId, otherCallback).href);
    assert.equal(new URL(page.url()).origin, gateway, 'a new redirect URI asks');
    await page.getByRole('button', { name: 'Allow' }).waitFor();
    await page.goto(attackerLink(await registerAttacker('Claude')).href);
    assert.equal(new URL(page.url()).origin, gateway, 'a new client asks');
    await page.getByRole('button', { name: 'Allow' }).waitFor();
    assert.equal(reached.length, before, 'nothing reached the attacker');
  });
});

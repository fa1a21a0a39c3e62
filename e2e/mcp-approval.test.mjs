// The consent bypass, tried as an attacker: anyone may register
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
import { artifactsDir, axeViolations, env, launchChromium, remember } from './lib.mjs';

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
 * A browser of its own (a Playwright context: its own cookies) whose
 * navigations to the attacker's host are answered locally and recorded.
 */
async function routedContext() {
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
  return { context, page };
}

/** Signs in on the exchange's login page the browser shows. */
async function signIn(page, user) {
  await page.getByLabel('Email address').fill(user.email);
  await page.getByLabel('Password').fill(user.password);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.waitForLoadState();
}

/**
 * The victim: a browser signed in at the exchange. Navigations to the
 * attacker's host are answered locally and recorded.
 */
async function signedInVictim(user = victim) {
  const { context, page } = await routedContext();
  await page.goto(`${exchange}/o/login/`);
  await signIn(page, user);
  assert.ok((await page.content()).includes(user.email), `${user.email} is signed in at the exchange`);
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

/**
 * Opens an authorization link at the gateway in a browser that is not
 * signed in at the exchange, clicks Allow when the approval page asks, and
 * returns the link the gateway forwarded the browser to: the exchange's
 * /o/authorize/ with the gateway's client and its sealed state, where the
 * exchange's login page now shows.
 */
async function forwardedLink(page, href) {
  await page.goto(href);
  if (new URL(page.url()).origin === gateway) {
    await Promise.all([page.waitForURL((u) => u.href.startsWith(`${exchange}/o/authorize`)), page.getByRole('button', { name: 'Allow' }).click()]);
  }
  await page.getByLabel('Email address').waitFor();
  assert.ok(page.url().startsWith(`${exchange}/o/authorize`), `forwarded to ${page.url()}`);
  return new URL(page.url());
}

// The approval, bound to the browser that gave it: the attacker approves
// his own client in his own browser and sends the link the gateway
// forwarded him to; opened in the victim's browser (signed in, or signing
// in on the genuine login page), it ends on the gateway's error page and
// no code reaches anyone. And the scope of that link, edited, gives no
// token that can write.
describe('MCP gateway: a forwarded link replayed in another browser, an edited scope', { concurrency: false }, () => {
  let attackerBrowser, clientId;
  // The attacker signs in as himself: a Cardiology member, who may change
  // patients' records with a token of his own. No other file signs in as him.
  const attackerUser = { email: 'member@example.org', password: victim.password };

  before(async () => {
    attackerBrowser = await routedContext();
    clientId = await registerAttacker('Claude');
  });
  after(async () => {
    await attackerBrowser?.context.close();
  });

  /** Checks that the page is the gateway's refusal and nothing reached the attacker. */
  async function refused(page, res, before) {
    assert.deepEqual(reached.slice(before).map(String), [], 'nothing reached the attacker');
    assert.equal(res?.status(), 403);
    assert.equal(new URL(page.url()).origin + new URL(page.url()).pathname, `${gateway}/oauth/callback`);
    await page.getByRole('heading', { level: 1, name: 'This sign-in was not started in this browser' }).waitFor();
    assert.match(await page.locator('main').textContent(), /Nothing was shared/);
    assert.deepEqual(await axeViolations(page), [], 'axe-core: no serious or critical violation on the refusal page');
  }

  it('refuses the link in a browser signed in as the victim', async () => {
    const link = await forwardedLink(attackerBrowser.page, attackerLink(clientId).href);
    const other = await signedInVictim();
    try {
      const before = reached.length;
      const res = await other.page.goto(link.href).catch(() => null); // a navigation to the attacker's host may fail
      await refused(other.page, res, before);
      await other.page.screenshot({ path: join(artifactsDir(), 'mcp-approval-replayed-link.png'), fullPage: true });
    } finally {
      await other.context.close();
    }
  });

  it('refuses the link in a browser where the victim signs in on the login page it shows', async () => {
    const link = await forwardedLink(attackerBrowser.page, attackerLink(clientId).href);
    const other = await routedContext();
    try {
      const before = reached.length;
      await other.page.goto(link.href);
      await other.page.getByLabel('Email address').waitFor();
      const answer = other.page.waitForResponse((r) => r.url().startsWith(`${gateway}/oauth/callback`));
      await signIn(other.page, victim);
      await refused(other.page, await answer, before);
    } finally {
      await other.context.close();
    }
  });

  it('gives no token for an edited scope, and the gateway token cannot write', async () => {
    const { page } = attackerBrowser;
    for (const scope of ['openid profile email offline_access fhirUser user/*.rs exchange/admin.read user/*.cruds exchange/admin.write', 'openid']) {
      const link = attackerLink(clientId);
      const edited = await forwardedLink(page, link.href);
      edited.searchParams.set('scope', scope);
      // The exchange refuses before its login page; were it to show it,
      // the attacker would sign in as himself.
      const back = await arrival(page, '/cb', async () => {
        await page.goto(edited.href);
        if (await page.getByLabel('Email address').count()) await signIn(page, attackerUser);
      });
      assert.equal(back.searchParams.get('error'), 'invalid_scope', `scope ${scope}: ${back}`);
      assert.equal(back.searchParams.get('state'), link.state);
      assert.ok(!back.searchParams.has('code'), `scope ${scope}: no code`);
    }
    // Unedited, the attacker's own flow gives a read token, which the
    // exchange refuses to let write.
    const link = attackerLink(clientId);
    await forwardedLink(page, link.href);
    const back = await arrival(page, '/cb', () => signIn(page, attackerUser));
    const res = await fetch(`${gateway}/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'authorization_code', client_id: clientId, code: back.searchParams.get('code'), code_verifier: link.verifier, redirect_uri: callback }),
    });
    const tokens = await res.json();
    assert.equal(res.status, 200, JSON.stringify(tokens));
    remember(tokens.access_token, tokens.refresh_token);
    assert.equal(tokens.scope, 'openid profile email offline_access fhirUser user/*.rs exchange/admin.read');
    const auth = { Authorization: `Bearer ${tokens.access_token}` };
    const { results } = await (await fetch(`${exchange}/api/v1/patients`, { headers: auth })).json();
    assert.ok(results?.[0]?.id, 'the member reads the patients of Cardiology');
    const patch = await fetch(`${exchange}/api/v1/patients/${results[0].id}`, {
      method: 'PATCH',
      headers: { ...auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ nameFamily: 'Changed' }),
    });
    const refusal = await patch.json();
    assert.equal(patch.status, 403, JSON.stringify(refusal));
    assert.match(refusal.detail, /exchange\/admin\.write/);
  });
});

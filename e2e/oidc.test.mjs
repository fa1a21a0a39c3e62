// OAuth 2 / OpenID Connect as an outside client sees it: discovery, the
// authorization code flow with PKCE driven through the real login and
// consent pages in headless Chromium, the token, userinfo and API endpoints,
// and refresh token rotation. The client is the certified npm openid-client.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createPublicKey, verify } from 'node:crypto';
import { join } from 'node:path';
import * as client from 'openid-client';
import { artifactsDir, env, launchChromium, newCallbackPage, signIn, waitForCallback } from './lib.mjs';

const base = env('EXCHANGE_URL');
const clientId = env('EXCHANGE_CLIENT_ID');
const redirectUri = env('EXCHANGE_REDIRECT_URI');
const issuer = `${base}/o`;
const scope = 'openid profile email offline_access';

const patient = { email: 'alice@example.org', password: 'exchange-demo-password' };

let browser;
/** Discovered configuration with signature checks of ID tokens. */
let config;

before(async () => {
  browser = await launchChromium();
  config = await client.discovery(new URL(issuer), clientId, undefined, client.None(), {
    execute: [client.allowInsecureRequests],
  });
  client.enableNonRepudiationChecks(config);
});

after(async () => {
  await browser?.close();
});

/** A fresh authorization request: its URL and the secrets to check the answer. */
async function authorizationRequest(overrides = {}) {
  const codeVerifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope,
    code_challenge: await client.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
    state,
    nonce,
    ...overrides,
  });
  return { url, codeVerifier, state, nonce };
}

/** A new browser context and page that answers the redirect URI itself (lib.mjs). */
const newPage = () => newCallbackPage(browser, redirectUri);

/** The URL of the page's next request to the redirect URI (lib.mjs). */
const nextCallback = (page) => waitForCallback(page, redirectUri);

/** With the page signed in: runs an authorization request through consent. */
async function authorize(page, req) {
  await page.goto(req.url.href);
  const callback = nextCallback(page);
  await page.getByRole('button', { name: 'Allow' }).click();
  const returned = await callback;
  // Wait for the navigation that ends the flow, not an earlier one. The
  // redirect to the callback is not routed (lib.mjs), so Chromium first
  // shows its error page (nothing listens there), then auto-reloads the
  // URL about a second later, and that reload is routed. Stopping at the
  // error page left the reload pending, to interrupt the next test's
  // page.goto ("interrupted by another navigation"); the routed callback
  // page is where the page comes to rest.
  await page.waitForURL((u) => u.href.startsWith(redirectUri), { waitUntil: 'load' });
  return returned;
}

/** The code grant of an authorization response, checked as openid-client does. */
function grant(returned, req) {
  return client.authorizationCodeGrant(config, returned, {
    pkceCodeVerifier: req.codeVerifier,
    expectedState: req.state,
    expectedNonce: req.nonce,
    idTokenExpected: true,
  });
}

async function profile(accessToken) {
  const res = await fetch(`${base}/api/v1/users/profile`, {
    headers: { Authorization: `Bearer ${accessToken}`, Accept: 'application/json' },
  });
  const text = await res.text();
  return { status: res.status, text, json: res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : undefined };
}

/** Verifies a JWS with node:crypto against the JWKS, independently of openid-client. */
async function verifyRS256(jwt) {
  const [h, p, s] = jwt.split('.');
  const header = JSON.parse(Buffer.from(h, 'base64url').toString());
  assert.equal(header.alg, 'RS256', 'ID token alg');
  const jwks = await (await fetch(config.serverMetadata().jwks_uri)).json();
  const jwk = jwks.keys.find((k) => (header.kid ? k.kid === header.kid : k.kty === 'RSA'));
  assert.ok(jwk, `JWKS has the key ${header.kid} the ID token was signed with`);
  const key = createPublicKey({ key: jwk, format: 'jwk' });
  const ok = verify('RSA-SHA256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url'));
  assert.ok(ok, 'the ID token signature verifies against the JWKS');
  // A token altered in its payload must not verify.
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p, 'base64url')), sub: '0' })).toString('base64url');
  assert.ok(!verify('RSA-SHA256', Buffer.from(`${h}.${forged}`), key, Buffer.from(s, 'base64url')));
}

describe('OpenID Connect discovery', () => {
  it('serves the provider metadata of issuer /o with S256 PKCE only', async () => {
    const res = await fetch(`${issuer}/.well-known/openid-configuration`);
    assert.equal(res.status, 200);
    const m = config.serverMetadata();
    assert.equal(m.issuer, issuer);
    assert.deepEqual(m.code_challenge_methods_supported, ['S256']);
    assert.equal(m.authorization_endpoint, `${issuer}/authorize/`);
    assert.equal(m.token_endpoint, `${issuer}/token/`);
    assert.equal(m.userinfo_endpoint, `${issuer}/userinfo/`);
    assert.equal(m.jwks_uri, `${issuer}/.well-known/jwks.json`);
    assert.ok(m.id_token_signing_alg_values_supported.includes('RS256'));
    assert.ok(m.token_endpoint_auth_methods_supported.includes('none'), 'public clients (auth method none)');
    const jwks = await (await fetch(m.jwks_uri)).json();
    assert.ok(jwks.keys.some((k) => k.kty === 'RSA'), 'JWKS has an RSA key');
    assert.ok(jwks.keys.every((k) => k.d === undefined), 'JWKS publishes no private key material');
  });
  // The document follows X-Forwarded-Host (the service sits behind proxies),
  // so a shared cache must key it by that header.
  it('keeps a discovery document built from X-Forwarded-Host out of shared caches', async () => {
    const res = await fetch(`${issuer}/.well-known/openid-configuration`, {
      headers: { 'X-Forwarded-Host': 'attacker.example', 'X-Forwarded-Proto': 'https' },
    });
    assert.equal(res.status, 200);
    const m = await res.json();
    if (m.issuer === issuer) return; // the header is not trusted from this client
    const cacheControl = res.headers.get('cache-control') ?? '';
    const vary = (res.headers.get('vary') ?? '').toLowerCase();
    assert.ok(
      !/\bpublic\b/.test(cacheControl) || vary.includes('x-forwarded-host') || vary === '*',
      `issuer ${m.issuer} from X-Forwarded-Host, Cache-Control "${cacheControl}", Vary "${vary}"`,
    );
  });
});

describe('authorization code flow with PKCE for a patient', { concurrency: false }, () => {
  /** What one step hands to the next. */
  let tokens, claims, refreshed;

  it('signs in and consents in the browser, then exchanges the code', { timeout: 90_000 }, async () => {
    const req = await authorizationRequest();
    const { context, page } = await newPage();
    try {
      const first = await page.goto(req.url.href);
      assert.equal(first.status(), 200, 'the authorization endpoint shows the login page');
      await page.getByRole('heading', { name: 'Sign in' }).waitFor();
      await page.screenshot({ path: join(artifactsDir(), 'login.png'), fullPage: true });

      const login = await signIn(page, patient.email, patient.password);
      assert.equal(login.status(), 303, 'a good password redirects back to the authorization request');

      const allow = page.getByRole('button', { name: 'Allow' });
      await allow.waitFor();
      assert.ok(new URL(page.url()).pathname.startsWith('/o/authorize'), `consent is asked on ${page.url()}`);
      await page.getByRole('button', { name: 'Deny' }).waitFor();
      await page.getByText(patient.email).waitFor();
      await page.screenshot({ path: join(artifactsDir(), 'consent.png'), fullPage: true });

      const callback = nextCallback(page);
      await allow.click();
      const returned = await callback;
      assert.equal(`${returned.origin}${returned.pathname}`, redirectUri);
      assert.equal(returned.searchParams.get('state'), req.state);
      assert.ok(returned.searchParams.get('code'), 'the response carries a code');
      assert.equal(returned.searchParams.get('error'), null);

      tokens = await grant(returned, req);
    } finally {
      await context.close();
    }

    assert.ok(tokens.access_token, 'access_token');
    assert.match(tokens.token_type, /^bearer$/i);
    assert.equal(typeof tokens.expires_in, 'number');
    assert.ok(tokens.expires_in > 0, 'expires_in > 0');
    assert.ok(tokens.refresh_token, 'refresh_token (offline_access)');
    assert.ok(tokens.id_token, 'id_token');
    assert.equal(typeof tokens.scope, 'string');
    for (const s of scope.split(' ')) assert.ok(tokens.scope.split(' ').includes(s), `granted scope ${s}`);

    claims = tokens.claims();
    assert.ok(claims.sub, 'sub');
    assert.equal(claims.iss, issuer);
    assert.equal(claims.email, patient.email);
    const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    assert.ok(aud.includes(clientId), `aud ${JSON.stringify(claims.aud)} contains the client id`);
    assert.ok(claims.nonce, 'nonce');
    assert.ok(claims.exp > Date.now() / 1000, 'exp is in the future');
    await verifyRS256(tokens.id_token);
  });

  it('answers userinfo for the access token', async () => {
    assert.ok(tokens, 'needs the tokens of the previous step');
    const info = await client.fetchUserInfo(config, tokens.access_token, claims.sub);
    assert.equal(info.sub, claims.sub);
    assert.equal(info.email, patient.email);
  });

  it('serves the API profile to the bearer access token', async () => {
    assert.ok(tokens, 'needs the tokens of the previous step');
    const res = await profile(tokens.access_token);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.email, patient.email);
    assert.equal(res.json.userType, 'patient');
    assert.equal(res.json.isSuperuser, false);
    assert.ok(res.json.patient, 'patient is set');
    assert.equal(typeof res.json.patient.id, 'number');
    assert.equal(String(res.json.id), claims.sub, 'the profile is the ID token subject');
  });

  it('refuses the API without a valid token', async () => {
    assert.equal((await fetch(`${base}/api/v1/users/profile`)).status, 401);
    assert.equal((await profile('not-a-token')).status, 401);
    assert.ok(tokens, 'needs the tokens of the first step');
    assert.equal((await profile(tokens.refresh_token)).status, 401, 'a refresh token is no access token');
    assert.equal((await profile(tokens.id_token)).status, 401, 'an ID token is no access token');
  });

  it('rotates the refresh token', async () => {
    assert.ok(tokens, 'needs the tokens of the previous step');
    refreshed = await client.refreshTokenGrant(config, tokens.refresh_token);
    assert.ok(refreshed.access_token);
    assert.ok(refreshed.refresh_token);
    assert.notEqual(refreshed.access_token, tokens.access_token, 'a new access token');
    assert.notEqual(refreshed.refresh_token, tokens.refresh_token, 'a new refresh token');
    assert.match(refreshed.token_type, /^bearer$/i);

    const res = await profile(refreshed.access_token);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.email, patient.email);
  });

  it('refuses the used refresh token', async () => {
    assert.ok(refreshed, 'needs the refresh of the previous step');
    await assert.rejects(client.refreshTokenGrant(config, tokens.refresh_token), (err) => {
      assert.equal(err.error, 'invalid_grant', `error ${err.error}: ${err.message}`);
      return true;
    });
  });
  it('revokes the rotated tokens once a used refresh token comes back', async () => {
    // Reuse of a rotated refresh token means it leaked (OAuth 2.0 Security
    // BCP, refresh token rotation): the whole grant is revoked.
    assert.ok(refreshed, 'needs the refresh of the previous steps');
    assert.equal((await profile(refreshed.access_token)).status, 401);
    await assert.rejects(client.refreshTokenGrant(config, refreshed.refresh_token), (err) => err.error === 'invalid_grant');
  });
});

describe('authorization codes and tokens', { concurrency: false }, () => {
  /** A browser session signed in as a patient, for further grants (made on first use). */
  let session;
  async function signedInPage() {
    if (!session) {
      session = newPage().then(async (s) => {
        await s.page.goto((await authorizationRequest()).url.href);
        const login = await signIn(s.page, 'dan@example.org', patient.password);
        assert.equal(login.status(), 303);
        return s;
      });
    }
    return (await session).page;
  }

  after(async () => {
    if (session) await (await session.catch(() => undefined))?.context.close();
  });

  it('redeems a code once; a second redemption is refused and revokes its tokens', async () => {
    const req = await authorizationRequest();
    const returned = await authorize(await signedInPage(), req);
    const tokens = await grant(returned, req);
    assert.equal((await profile(tokens.access_token)).json?.email, 'dan@example.org');
    await assert.rejects(grant(returned, req), (err) => err.error === 'invalid_grant');
    assert.equal((await profile(tokens.access_token)).status, 401, 'the tokens of a replayed code are revoked');
  });

  it('refuses a code without its PKCE verifier', async () => {
    const req = await authorizationRequest();
    const returned = await authorize(await signedInPage(), req);
    await assert.rejects(
      grant(returned, { ...req, codeVerifier: client.randomPKCECodeVerifier() }),
      (err) => err.error === 'invalid_grant',
    );
  });

  it('lets a public client revoke its tokens', async () => {
    const req = await authorizationRequest();
    const tokens = await grant(await authorize(await signedInPage(), req), req);
    await client.tokenRevocation(config, tokens.access_token);
    assert.equal((await profile(tokens.access_token)).status, 401);
    await client.tokenRevocation(config, tokens.refresh_token);
    await assert.rejects(client.refreshTokenGrant(config, tokens.refresh_token), (err) => err.error === 'invalid_grant');
  });

  it('gives the email only with the email scope', async () => {
    const req = await authorizationRequest({ scope: 'openid' });
    const tokens = await grant(await authorize(await signedInPage(), req), req);
    const info = await client.fetchUserInfo(config, tokens.access_token, tokens.claims().sub);
    assert.equal(info.email, undefined, 'userinfo has no email');
    assert.equal(tokens.claims().email, undefined, 'the ID token has no email');
  });
});

describe('authorization request checks', () => {
  /** The service's answer to an authorization request, without following it. */
  async function answer(params) {
    const { url } = await authorizationRequest();
    for (const [k, v] of Object.entries(params)) {
      if (v === undefined) url.searchParams.delete(k);
      else url.searchParams.set(k, v);
    }
    const res = await fetch(url, { redirect: 'manual' });
    const location = res.headers.get('location');
    return { status: res.status, location: location && new URL(location, url), body: await res.text() };
  }

  /** Asserts an error redirect to the client, as RFC 6749 4.1.2.1 has it. */
  function assertErrorRedirect(res, error, state) {
    assert.ok([302, 303].includes(res.status), `a redirect, not ${res.status}`);
    assert.equal(`${res.location.origin}${res.location.pathname}`, redirectUri);
    assert.equal(res.location.searchParams.get('error'), error);
    assert.equal(res.location.searchParams.get('code'), null);
    if (state !== undefined) assert.equal(res.location.searchParams.get('state'), state);
  }

  it('requires a state of at least 8 characters', async () => {
    assertErrorRedirect(await answer({ state: 'abc' }), 'invalid_state', 'abc');
    assertErrorRedirect(await answer({ state: undefined }), 'invalid_state');
  });

  it('requires PKCE with S256', async () => {
    assertErrorRedirect(await answer({ code_challenge: undefined, code_challenge_method: undefined, state: 'state-no-pkce' }), 'invalid_request', 'state-no-pkce');
    assertErrorRedirect(await answer({ code_challenge: 'x'.repeat(43), code_challenge_method: 'plain', state: 'state-plain' }), 'invalid_request', 'state-plain');
  });

  it('answers prompt=none without a session with login_required', async () => {
    assertErrorRedirect(await answer({ prompt: 'none', state: 'state-prompt-none' }), 'login_required', 'state-prompt-none');
  });

  it('never redirects to an unregistered redirect URI or for an unknown client', async () => {
    for (const params of [{ redirect_uri: `${redirectUri}/other` }, { redirect_uri: 'https://attacker.example/cb' }, { client_id: 'no-such-client' }]) {
      const res = await answer(params);
      assert.equal(res.status, 400, `${JSON.stringify(params)}: ${res.status}`);
      assert.equal(res.location, null, `${JSON.stringify(params)} is not redirected`);
    }
  });
});

describe('login page', () => {
  it('shows an error and stays on the login page after a wrong password', { timeout: 60_000 }, async () => {
    const req = await authorizationRequest();
    const { context, page, callbacks } = await newPage();
    try {
      await page.goto(req.url.href);
      const res = await signIn(page, 'bob@example.org', 'not-the-password');
      assert.equal(res.status(), 401, 'the failed login POST answers 401');
      const alert = page.getByRole('alert');
      await alert.waitFor();
      assert.ok((await alert.innerText()).trim().length > 0, 'the alert says what went wrong');
      assert.equal(new URL(page.url()).pathname, '/o/login/');
      await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
      assert.equal(await page.getByLabel('Email address').inputValue(), 'bob@example.org', 'the email is kept');
      assert.equal(await page.getByLabel('Password').inputValue(), '', 'the password is not echoed back');
      await page.screenshot({ path: join(artifactsDir(), 'login-error.png'), fullPage: true });
      assert.deepEqual(callbacks, [], 'the client is never called back');
    } finally {
      await context.close();
    }
  });

  it('returns access_denied to the client when the user denies', { timeout: 60_000 }, async () => {
    const req = await authorizationRequest();
    const { context, page } = await newPage();
    try {
      await page.goto(req.url.href);
      const login = await signIn(page, 'carol@example.org', patient.password);
      assert.equal(login.status(), 303);
      const callback = nextCallback(page);
      await page.getByRole('button', { name: 'Deny' }).click();
      const returned = await callback;
      assert.equal(returned.searchParams.get('error'), 'access_denied');
      assert.equal(returned.searchParams.get('state'), req.state);
      assert.equal(returned.searchParams.get('code'), null);
      await assert.rejects(
        client.authorizationCodeGrant(config, returned, {
          pkceCodeVerifier: req.codeVerifier,
          expectedState: req.state,
          expectedNonce: req.nonce,
        }),
        (err) => err.error === 'access_denied',
      );
    } finally {
      await context.close();
    }
  });
});

describe('login session', () => {
  // A copy of the session cookie (stolen from a shared computer, a proxy
  // log) is what silent sign-in trusts: signing out must end it at the
  // server, not only in the browser that signs out.
  it('ends at the server on sign-out: a cookie copied before is refused after', { timeout: 90_000 }, async () => {
    const { context, page } = await newPage();
    const thief = await newPage();
    try {
      await page.goto(`${base}/o/login/`);
      const login = await signIn(page, 'norole@example.org', patient.password);
      assert.equal(login.status(), 303);
      await page.getByText('You are signed in as norole@example.org').waitFor();
      const session = (await context.cookies(base)).find((c) => c.name === 'exchange_session');
      assert.ok(session, 'a session cookie');
      assert.equal(session.path, '/', 'the whole origin (the console) receives it');
      assert.ok(session.httpOnly, 'HttpOnly');
      assert.equal(session.sameSite, 'Lax');
      assert.equal(
        (await fetch(`${base}/api/v1/users/profile`, { headers: { Cookie: `exchange_session=${session.value}` } })).status,
        401,
        'the API never takes the cookie',
      );

      // The copy works in another browser while the session lives...
      await thief.context.addCookies([{ name: session.name, value: session.value, url: base }]);
      const silent = async (state) => {
        const req = await authorizationRequest({ prompt: 'none', state });
        const callback = nextCallback(thief.page);
        await thief.page.goto(req.url.href).catch(() => {});
        return (await callback).searchParams.get('error');
      };
      assert.notEqual(await silent('state-before-sign-out'), 'login_required', 'the copied cookie signs in before sign-out');

      // ...and not after the owner signs out.
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByText('You are signed out').waitFor();
      assert.equal((await context.cookies(base)).find((c) => c.name === 'exchange_session'), undefined, 'the browser drops the cookie');
      assert.equal(await silent('state-after-sign-out'), 'login_required', 'the copied cookie is refused after sign-out');
    } finally {
      await context.close();
      await thief.context.close();
    }
  });
});

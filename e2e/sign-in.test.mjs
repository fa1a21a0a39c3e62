// Institutional sign-in as people meet it, in headless Chromium: a
// practitioner signs in to the console through an OpenID Connect provider
// (npm oidc-provider, "University") and through a SAML identity provider
// (crewjam/saml's samlidp, "Campus"), both started by e2e/run; and a SMART
// app's authorization through a federated sign-in still gets its scopes
// and patient context. See docs/sign-in.md.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import * as client from 'openid-client';
import { api, artifactsDir, axeViolations, bearerToken, env, fhir, launchChromium, newCallbackPage, remember, waitForCallback } from './lib.mjs';

const base = env('EXCHANGE_URL');
const oidcIdP = env('EXCHANGE_OIDC_IDP_URL');
const samlIdP = env('EXCHANGE_SAML_IDP_URL');

let browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

/** Signs in at oidc-provider's development login (any password), and consents when asked. */
async function universityLogin(page, name) {
  await page.waitForURL((u) => u.origin === oidcIdP);
  const password = `password-of-${name}`;
  remember(password);
  await page.locator('input[name="login"]').fill(name);
  await page.locator('input[name="password"]').fill(password);
  await page.getByRole('button', { name: 'Sign-in' }).click();
  // Its consent prompt, the first time a client asks; else straight back.
  const proceed = page.getByRole('button', { name: 'Continue' });
  const next = await Promise.race([
    proceed.waitFor().then(() => 'consent', () => 'none'),
    page.waitForURL((u) => u.origin !== oidcIdP).then(() => 'back', () => 'none'),
  ]);
  if (next === 'consent') await proceed.click();
}

/** The console's signed-in user, as its header shows them. */
async function consoleUser(page) {
  await page.waitForURL(`${base}/console/`);
  return page.locator('.who span').first().innerText();
}

describe('institutional sign-in', { concurrency: false }, () => {
  it('a practitioner signs in to the console through the OpenID Connect provider', { timeout: 120_000 }, async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await page.goto(`${base}/console/`);
      await page.getByRole('button', { name: 'Sign in with University' }).waitFor();
      assert.deepEqual(await axeViolations(page), [], 'the login page with its providers is accessible');
      await page.screenshot({ path: join(artifactsDir(), 'sign-in-login.png'), fullPage: true });
      await page.getByRole('button', { name: 'Sign in with University' }).click();
      await universityLogin(page, 'grace');
      assert.equal(await consoleUser(page), 'grace@example.org');
    } finally {
      await context.close();
    }
  });

  it('a practitioner signs in to the console through the SAML identity provider', { timeout: 120_000 }, async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await page.goto(`${base}/console/`);
      await page.getByRole('button', { name: 'Sign in with Campus' }).click();
      await page.waitForURL((u) => u.origin === samlIdP);
      remember('campus-password');
      await page.locator('input[name="user"]').fill('ada');
      await page.locator('input[name="password"]').fill('campus-password');
      await page.getByRole('button', { name: 'Log In' }).click();
      // The provider's answer posts itself to the exchange's ACS.
      assert.equal(await consoleUser(page), 'ada@campus.example');
    } finally {
      await context.close();
    }
  });

  it("a SMART app's flow through a federated sign-in gets its scopes and patient context", { timeout: 120_000 }, async () => {
    // A superuser invites the seeded manager's address to University: her
    // first sign-in there opens her account, and its patients.
    const admin = await bearerToken('admin@example.org');
    const invited = await api('/identity_providers/uni/invitations', { token: admin, method: 'POST', body: { email: 'manager@example.org' } });
    assert.equal(invited.status, 201, JSON.stringify(invited.json));
    const found = await fhir('/Patient?family=Nguyen', { token: admin });
    const alice = found.json.entry[0].resource.id;

    const redirectUri = env('EXCHANGE_REDIRECT_URI');
    const config = await client.discovery(new URL(`${base}/o`), env('EXCHANGE_CLIENT_ID'), undefined, client.None(), {
      execute: [client.allowInsecureRequests],
    });
    const scope = 'openid fhirUser launch/patient patient/*.rs';
    const codeVerifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri, scope, state, aud: `${base}/FHIR/R5`,
      code_challenge: await client.calculatePKCECodeChallenge(codeVerifier), code_challenge_method: 'S256',
    });
    const { context, page } = await newCallbackPage(browser, redirectUri);
    try {
      await page.goto(url.href);
      await page.getByRole('button', { name: 'Sign in with University' }).click();
      await universityLogin(page, 'manager');
      await page.getByRole('button', { name: 'Allow' }).click();
      await page.getByRole('heading', { name: 'Choose a patient' }).waitFor();
      await page.getByLabel('Patient name').fill('Nguyen');
      await page.getByRole('button', { name: 'Search' }).click();
      await page.getByLabel(/Nguyen/).check();
      const callback = waitForCallback(page, redirectUri);
      await page.getByRole('button', { name: "Open this patient's record" }).click();
      const tokens = await client.authorizationCodeGrant(config, await callback, { pkceCodeVerifier: codeVerifier, expectedState: state });
      remember(tokens.access_token, tokens.refresh_token);
      assert.equal(tokens.scope, scope);
      assert.equal(String(tokens.patient), alice, 'the patient chosen is the context');
      assert.match(tokens.claims().fhirUser, /\/Practitioner\/\d+$/);
      const profile = await api('/api/v1/users/profile', { token: tokens.access_token });
      assert.equal(profile.status, 403, 'patient/ scopes do not reach the admin API');
    } finally {
      await context.close();
    }
  });
});

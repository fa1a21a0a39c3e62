// Sign-in an attacker cannot block, in headless Chromium. A script posts
// wrong passwords for one account from a new address every 100 ms (as a
// botnet would), so the account's count across addresses never leaves
// its delay: a blind attempt of the owner is held back (429). The owner
// on a new machine signs in all the same: the login page's own script
// solves the proof of work (WebCrypto, under the page's CSP), and worked
// attempts have capacity the polling script never touches. The owner's
// browser then holds a device cookie, and signs in from yet another
// network while the attack goes on.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { bearerToken, env, formSignIn, launchChromium, signIn } from './lib.mjs';

const base = env('EXCHANGE_URL');
let browser;
const cspViolations = [];

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

/** A browser context (a machine of its own) at a client address. */
async function machine(address) {
  const context = await browser.newContext();
  await context.setExtraHTTPHeaders({ 'X-Forwarded-For': address });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on('console', (msg) => {
    if (/Content.Security.Policy|Refused to/i.test(msg.text())) cspViolations.push(msg.text());
  });
  return { context, page };
}

describe('sign-in under a rotating-address attack', () => {
  it('holds back blind attempts and lets the owner in', { timeout: 180_000 }, async () => {
    const run = randomBytes(4).toString('hex');
    const email = `owner-${run}@signin.example.net`;
    const password = `the owner's password ${run}`;
    const admin = await bearerToken('admin@example.org');
    const created = await fetch(`${base}/api/v1/patients`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ email, password, nameFamily: 'Owner', nameGiven: ['Olu'], organizationIds: [1] }),
    });
    assert.equal(created.status, 201, await created.text());

    // The attack: a new address for every attempt, a poll every 100 ms.
    let attacking = true;
    let attempts = 0;
    const attack = (async () => {
      while (attacking) {
        attempts++;
        await formSignIn(base, email, `guess-${attempts}`, { forwardedFor: `203.0.${113 + (attempts >> 8)}.${attempts & 255}` });
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    try {
      await new Promise((r) => setTimeout(r, 8_000)); // the count climbs past its free failures
      const blind = await formSignIn(base, email, password, { forwardedFor: '198.51.100.70' });
      assert.equal(blind.res.status, 429, 'a blind attempt of the owner during the attack');

      const { context, page } = await machine('198.51.100.71');
      await page.goto(`${base}/o/login/`);
      const response = await signIn(page, email, password);
      assert.equal(response.status(), 303, 'the owner on a new machine, its page solving the work');
      const posted = new URLSearchParams(response.request().postData());
      assert.match(posted.get('work') ?? '', /^\d+$/, 'the page posted its proof of work');
      await page.waitForURL(`${base}/o/login/`);
      await assert.doesNotReject(page.getByText(`You are signed in as ${email}`).waitFor());
      const device = (await context.cookies()).find((c) => c.name === 'exchange_device');
      assert.ok(device?.httpOnly && device.path === '/o/', 'the browser keeps a device cookie');

      // That browser on another network, with scripts off (no proof of
      // work): its device cookie alone lets it in.
      const bare = await browser.newContext({ javaScriptEnabled: false });
      await bare.addCookies([device]);
      await bare.setExtraHTTPHeaders({ 'X-Forwarded-For': '198.51.100.72' });
      const again = await bare.newPage();
      await again.goto(`${base}/o/login/`);
      const second = await signIn(again, email, password);
      assert.equal(second.status(), 303, "the owner's browser on a new network, by its device cookie");
      assert.equal(new URLSearchParams(second.request().postData()).get('work'), '', 'no proof of work without scripts');
    } finally {
      attacking = false;
      await attack;
    }
    assert.ok(attempts > 40, `the attack made ${attempts} attempts`);
    assert.deepEqual(cspViolations, []);
  });
});

// Shared settings and helpers of the end-to-end tests. e2e/run sets the
// environment; each value is required so a test never runs against a guess.
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

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
export const chromiumArgs = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

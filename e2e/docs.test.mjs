// The documentation as a newcomer follows it: the README stays a front door
// (at most 300 lines), and every link between the repository's Markdown
// pages leads somewhere: to a file that exists and, for a link with an
// anchor, to a heading of that file (GitHub's anchors).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../', import.meta.url));
const pages = ['README.md', 'e2e/README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** The text of a page without its fenced code blocks, where links are not links. */
function prose(file) {
  return readFileSync(join(root, file), 'utf8').replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '');
}

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as dashes, repeats numbered. */
function anchors(file) {
  const seen = new Map();
  const out = new Set();
  for (const [, heading] of prose(file).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n ? `${slug}-${n}` : slug);
  }
  return out;
}

describe('the documentation', () => {
  it('README.md is a front door of at most 300 lines', () => {
    const lines = readFileSync(join(root, 'README.md'), 'utf8').trimEnd().split('\n').length;
    assert.ok(lines <= 300, `README.md has ${lines} lines`);
  });

  for (const page of pages) {
    it(`${page}: every link to a page of the repository, and its anchor, exists`, () => {
      const broken = [];
      for (const [, target] of prose(page).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/i.test(target)) continue; // https:, mailto:
        const [path, anchor] = target.split('#');
        const file = path ? relative(root, join(root, dirname(page), path)) : page;
        if (!existsSync(join(root, file))) {
          broken.push(`${target}: no file ${file}`);
        } else if (anchor && file.endsWith('.md') && !anchors(file).has(anchor)) {
          broken.push(`${target}: ${file} has no heading #${anchor}`);
        }
      }
      assert.deepEqual(broken, []);
    });
  }
});

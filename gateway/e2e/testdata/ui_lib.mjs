// Shared by the dashboard's browser tests (ui_e2e_test.go): headless Chromium through playwright-core, a
// guard that fails the run on any request to another host, a CSP violation or an uncaught error, numbered
// screenshots, and steps logged as JSON lines for the Go test.
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import path from 'node:path';

const require = createRequire(process.cwd() + '/');
const { chromium } = require('playwright-core');

export function log(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

export async function readConfig() {
  let raw = '';
  for await (const chunk of process.stdin) raw += chunk;
  return JSON.parse(raw);
}

export async function launch(cfg, contextOptions = {}) {
  const browser = await chromium.launch({
    executablePath: cfg.chromium,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 }, ...contextOptions });
  context.setDefaultTimeout(cfg.timeoutMs || 30000);
  const page = await context.newPage();
  const origin = new URL(cfg.url).origin;
  const problems = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol !== 'data:' && u.origin !== origin) problems.push('a request to another host: ' + r.url());
  });
  page.on('console', (m) => {
    const text = m.text();
    if (/Content Security Policy/i.test(text)) problems.push('CSP violation: ' + text);
    if (m.type() === 'error' && !/status of (401|403|404)|Failed to load resource/.test(text)) problems.push('console error: ' + text);
  });
  page.on('pageerror', (e) => problems.push('uncaught error: ' + e.message));
  mkdirSync(cfg.shots, { recursive: true });
  let n = 0;
  const shot = async (name) => {
    n++;
    const file = path.join(cfg.shots, `${String(n).padStart(2, '0')}-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    log({ screenshot: file });
  };
  const check = () => {
    if (problems.length) throw new Error(problems.join('\n'));
  };
  return { browser, context, page, shot, check, problems };
}

// step runs one named step, logging how long it took; a failure names the step and saves a screenshot.
export async function step(env, name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (err) {
    try { await env.shot('FAILED-' + name.replace(/\W+/g, '-')); } catch { /* the page may be gone */ }
    throw new Error(`step "${name}": ${err.message}`);
  }
  log({ step: name, ms: Date.now() - t0 });
  env.check();
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

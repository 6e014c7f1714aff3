// The web UI in a real browser: Debian's chromium, headless, driven by
// puppeteer-core against a running `loom serve` over a real store seeded by
// `loom seed` (run.sh starts both). Loads each page, clicks a filter and the
// actions, checks what is shown against the JSON API, writes screenshots.
//
//   node ui_test.mjs --url http://127.0.0.1:PORT --token TOKEN --out DIR [--label sqlite] [--rack]
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : true]);
  return acc;
}, []));
const base = args.url;
const label = args.label || 'store';
const out = args.out;
fs.mkdirSync(out, {recursive: true});

let failures = 0, passes = 0;
function check(ok, what) {
  if (ok) { passes++; console.log(`ok ${label}: ${what}`); } else { failures++; console.log(`FAIL ${label}: ${what}`); }
}
async function json(p) {
  const res = await fetch(base + p);
  return res.json();
}

const userData = fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'loom-chromium-'));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  userDataDir: userData,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--no-first-run',
         '--disable-dev-shm-usage'],
});
const timeout = 10000;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  await page.setViewport({width: 1400, height: 900});
  const offsite = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) offsite.push(r.url()); });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));

  // ---- Executions: live counts, a status filter by clicking its count ----
  await page.goto(base + '/#/', {waitUntil: 'networkidle0'});
  await page.waitForSelector('[data-testid="count-failed"]');
  const counts = (await json('/api/v1/counts')).counts;
  const shownFailed = await page.$eval('[data-testid="count-failed"] b', (b) => Number(b.textContent));
  check(shownFailed === counts.failed && counts.failed > 0, `the failed count shows ${shownFailed} (API ${counts.failed})`);
  const rowsAll = await page.$$eval('#executions tbody tr', (t) => t.length);
  check(rowsAll === Math.min(50, counts.total), `the first page shows ${rowsAll} executions`);
  await page.screenshot({path: path.join(out, `${label}-executions.png`)});

  await page.$eval('[data-testid="count-failed"]', (el) => el.click());  // the counts re-render every 2 s
  await page.waitForFunction(() => {
    const s = [...document.querySelectorAll('#executions tbody tr td:nth-child(3)')].map((td) => td.textContent);
    return s.length > 0 && s.every((x) => x === 'failed');
  }, {polling: 100});
  const failedRows = await page.$$eval('#executions tbody tr', (t) => t.length);
  check(failedRows === Math.min(50, counts.failed), `clicking "failed" lists ${failedRows} failed executions`);
  await page.screenshot({path: path.join(out, `${label}-executions-failed.png`)});

  // The filter form: workflow nap, parked on a timer.
  await page.select('#f-status', '');
  await page.type('#f-workflow', 'nap');
  await page.select('#f-parked', 'timer');
  await page.click('#filters button');
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#executions tbody tr')];
    return rows.length > 0 && rows.every((r) => r.children[1].textContent === 'nap' && r.children[7].textContent === 'timer');
  }, {polling: 100});
  const napRows = await page.$$eval('#executions tbody tr', (rows) => rows.map((r) => r.dataset.id));
  const napApi = await json('/api/v1/executions?workflow=nap&parked_on=timer&limit=50');
  check(JSON.stringify(napRows) === JSON.stringify(napApi.executions.map((r) => r.execution_id)),
        `workflow=nap parked_on=timer shows the API's ${napRows.length} rows in its order`);

  // ---- One execution: its timeline, then resume and cancel through the dialog ----
  const id = napRows[0];
  await page.$eval(`#executions tbody tr[data-id="${id}"] a`, (a) => a.click());
  await page.waitForSelector('#timeline');
  const kinds = await page.$$eval('#timeline tbody tr', (rows) => rows.map((r) => r.dataset.kind));
  check(kinds[0] === 'EXECUTION_STARTED' && kinds.includes('EXECUTION_SUSPENDED'), `the timeline of ${id}: ${kinds.join(', ')}`);
  const parkText = await page.$eval('#timeline tr.park', (tr) => tr.textContent);
  check(/parked on\s+timer/.test(parkText) && /open/.test(parkText), 'the park names its timer wait and is open');
  await page.screenshot({path: path.join(out, `${label}-execution-parked.png`), fullPage: true});

  // Without the token: refused, nothing changes.
  await page.click('#a-resume');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-ok');
  await page.waitForFunction(() => /refused: 401/.test(document.querySelector('#toast').textContent), {polling: 100});
  check((await json('/api/v1/executions/' + encodeURIComponent(id))).execution.status === 'suspended', 'an action without the token is refused (401) and changes nothing');

  // The dialog's Cancel button does nothing.
  await page.type('#token', args.token);
  await page.$eval('#token', (el) => el.dispatchEvent(new Event('change')));
  await page.click('#a-resume');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-cancel');
  check((await json('/api/v1/executions/' + encodeURIComponent(id))).execution.status === 'suspended', 'declining the confirmation changes nothing');

  await page.click('#a-resume');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-ok');
  await page.waitForFunction(() => [...document.querySelectorAll('#timeline tbody tr')].some((r) => r.dataset.kind === 'EXECUTION_RESUMED'), {polling: 100});
  const answered = await page.$eval('#timeline tr.park', (tr) => tr.textContent);
  check(/answered by #3 \(timer, by loom\)/.test(answered), 'after Resume the park shows the resume that answered it');
  const fenceMoved = await page.$eval('#timeline tr.answer', (tr) => tr.textContent);
  check(/fence 0 → 1/.test(fenceMoved), 'the resume row shows the fence moving 0 → 1');
  check((await json('/api/v1/executions/' + encodeURIComponent(id))).execution.status === 'running', 'the API shows it running');
  await page.screenshot({path: path.join(out, `${label}-execution-resumed.png`), fullPage: true});

  await page.click('#a-cancel');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-ok');
  await page.waitForFunction(() => /cancelled/.test((document.querySelector('h2') || {}).textContent), {polling: 100});
  check((await json('/api/v1/executions/' + encodeURIComponent(id))).execution.status === 'cancelled', 'Cancel ends it (the API agrees)');

  // Send to an execution parked on a message: it is stored, shown as pending.
  const ask = (await json('/api/v1/executions?parked_on=message&workflow=ask&limit=1')).executions[0].execution_id;
  await page.goto(base + '/#/execution/' + encodeURIComponent(ask), {waitUntil: 'networkidle0'});
  await page.waitForSelector('#a-send');
  await page.type('#a-topic', 'approve');
  await page.type('#a-message', '{"by":"the browser test"}');
  await page.click('#a-send');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-ok');
  await page.waitForFunction(() => /the browser test/.test(document.body.textContent), {polling: 100});
  const pending = (await json('/api/v1/executions/' + encodeURIComponent(ask))).pending_messages;
  check(pending.length === 1 && pending[0].topic === 'approve', 'Send stores the message; the page lists it as pending');

  // ---- Timers, nodes ----
  await page.goto(base + '/#/timers', {waitUntil: 'networkidle0'});
  await page.waitForSelector('#timers');
  const timerRows = await page.$$eval('#timers tr', (t) => t.length - 1);
  check(timerRows > 0, `the timers page lists ${timerRows} timers due within the hour`);
  await page.screenshot({path: path.join(out, `${label}-timers.png`)});
  await page.goto(base + '/#/nodes', {waitUntil: 'networkidle0'});
  await page.waitForFunction(() => document.querySelector('#nrows').textContent.length > 0 &&
    document.querySelector('#qrows').textContent.length > 0, {polling: 100});
  // Each box shows the API's rows, "none", or the API's refusal (a store
  // without queue tables says so).
  for (const [what, box] of [['nodes', '#nrows'], ['queues', '#qrows']]) {
    const answer = await json('/api/v1/' + what);
    const text = await page.$eval(box, (b) => b.textContent);
    const rows = await page.$eval(box, (b) => Math.max(0, b.querySelectorAll('tr').length - 1));
    if (answer.error) {
      const said = answer.error.message || JSON.stringify(answer.error);
      check(text.includes(said), `the nodes page shows the API's refusal of ${what}: ${said}`);
    } else {
      const n = (answer[what] || []).length;
      check(n === 0 ? /none/.test(text) : rows === n, `the nodes page shows the API's ${n} ${what}`);
    }
  }
  await page.screenshot({path: path.join(out, `${label}-nodes.png`)});

  // ---- The rack ----
  if (args.rack) {
    await page.goto(base + '/#/rack', {waitUntil: 'networkidle0'});
    await page.waitForFunction(() => document.querySelectorAll('.cubby').length === 32 &&
      document.querySelectorAll('.cubby:not(.empty)').length > 0 && /version (?!-)/.test(document.querySelector('.cubby:not(.empty)').textContent), {polling: 100});
    const rack = await json('/api/v1/rack');
    const filled = await page.$$eval('.cubby:not(.empty)', (c) => c.length);
    check(filled === rack.sleds.length, `the rack grid shows ${filled} sleds of 32 cubbies`);
    const verdicts = await page.$$eval('.cubby:not(.empty)', (cs) => cs.map((c) => c.textContent));
    check(verdicts.every((t) => /locker \S+/.test(t) && /session/.test(t)), 'each sled shows its version, session and locker verdict');
    await page.waitForSelector('#recent-jobs a');
    await page.$eval('#recent-jobs a', (a) => a.click());
    await page.waitForSelector('#job-statuses');
    const states = await page.$$eval('#job-statuses tr', (rows) => rows.slice(1).map((r) => r.children[2].textContent));
    check(states.length === rack.sleds.length && states.every((s) => s && s !== '-'), `a job's per-sled statuses: ${states.join(', ')}`);
    await page.screenshot({path: path.join(out, `${label}-rack.png`), fullPage: true});
  }

  check(offsite.length === 0, `no request left the server (${offsite.length} did)`);
  check(errors.length === 0, `no page errors ${errors.join('; ')}`);
} catch (e) {
  failures++;
  console.log(`FAIL ${label}: ${e.stack || e}`);
  for (const p of await browser.pages()) {
    console.log(`  at ${p.url()}; toast: ${await p.$eval('#toast', (t) => t.textContent).catch(() => '?')}`);
    await p.screenshot({path: path.join(out, `${label}-failure.png`), fullPage: true}).catch(() => {});
  }
} finally {
  await browser.close();
  fs.rmSync(userData, {recursive: true, force: true});
}
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);

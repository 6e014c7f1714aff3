// The web UI against a large store: time to the first page, the counts, a
// status filter and an older page (BENCHMARKS.md, "Visibility").
//   node ui_timing.mjs http://127.0.0.1:PORT out.png   (from a folder with puppeteer-core)
import puppeteer from 'puppeteer-core';
const [url, out] = process.argv.slice(2);
const b = await puppeteer.launch({executablePath: '/usr/bin/chromium', headless: true, userDataDir: '/tmp/op/ud-big',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']});
const p = await b.newPage();
await p.setViewport({width: 1400, height: 900});
let t = Date.now();
await p.goto(url + '/#/', {waitUntil: 'networkidle0'});
await p.waitForSelector('#executions tbody tr');
console.log('first page shown after', Date.now() - t, 'ms');
await p.waitForSelector('[data-testid="count-failed"]', {timeout: 20000});
console.log('counts shown after', Date.now() - t, 'ms');
t = Date.now();
await p.click('[data-testid="count-suspended"]');
await p.waitForFunction(() => [...document.querySelectorAll('#executions tbody tr td:nth-child(3)')].every((td) => td.textContent === 'suspended') && document.querySelectorAll('#executions tbody tr').length === 50, {polling: 50});
console.log('suspended filter shown after', Date.now() - t, 'ms');
t = Date.now();
await p.click('#next');
await p.waitForFunction(() => /page 2/.test(document.querySelector('.pager').textContent), {polling: 50});
console.log('older page shown after', Date.now() - t, 'ms');
await p.screenshot({path: out});
await b.close();

// Drives DSH 0.2.1's web UI (`dsh --profile web`) in headless Chromium like a person, for
// tests/e2e/test_webui_e2e.py. A JSON-lines server: one command per stdin line
// ({id, cmd, ...}), one answer per stdout line ({id, ok, result} or {id, ok: false, error}).
// Every page lives in its own browser context (its own cookie: the URL's ?token= sets it).
//
//   open    {name, url, workspace}  a page on `url`; `workspace`: a new session's first use
//                                   (Preview Notice, Choose workspace, Open: $HOME); else the
//                                   one session is opened from the sidebar (a cold restart)
//   send    {name, text}            type `text` into the composer and press Enter
//   settled {names, tails, compactions, timeoutMs}
//                                   until every page shows `tails` finished turns (usage row
//                                   under each) and `compactions` "Compacted" rows
//   view    {name, shot}            what the page shows: Chat (folds as they are), Trajectory,
//                                   the header's subagents button; screenshots `shot`-chat.png,
//                                   `shot`-column.png (the conversation alone), `shot`-trajectory.png
//   subagents {name, shot}          the header's subagents menu (entries, screenshot), then the
//                                   first entry's conversation (bubbles, a composer?), then back
//   compose {images, titles, out, scale}  one PNG of several side by side, each under its title
//   close   {name} | quit
//
// puppeteer-core comes from turn-memory's runtime cache ($TURN_MEMORY_WEBUI_MODULES, installed by
// `python -m turn_memory.devtools.runtime --webui`); the browser is $CHROMIUM (Debian's chromium).
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createInterface } from 'node:readline';
import { readFileSync } from 'node:fs';

const modules = process.env.TURN_MEMORY_WEBUI_MODULES;
const require = createRequire(join(modules, 'noop.js'));
const puppeteer = (await import(pathToFileURL(require.resolve('puppeteer-core')).href)).default;

const W = 1400, H = 2000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', `--window-size=${W},${H}`],
});
const pages = new Map(); // name -> {context, page, errors}

async function until(pred, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const got = await pred();
    if (got) return got;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(200);
  }
}
const bodyText = (page) => page.evaluate(() => document.body.innerText);
async function clickLabel(page, label) {
  return page.evaluate((label) => {
    const b = [...document.querySelectorAll('button, [role=button], [role=tab], a')]
      .find((e) => (e.innerText || '').trim() === label || e.getAttribute('aria-label') === label);
    if (b) b.click();
    return !!b;
  }, label);
}
function get(name) {
  const p = pages.get(name);
  if (!p) throw new Error(`no page ${name}`);
  return p;
}

async function open({ name, url, workspace }) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: W, height: H });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e.message || e).slice(0, 300)));
  pages.set(name, { context, page, errors });
  await page.goto(url, { waitUntil: 'networkidle2', timeout: 60000 });
  await until(async () => /Preview Notice|Choose workspace|New Session/.test(await bodyText(page)), 30000, 'the app');
  if ((await bodyText(page)).includes('Preview Notice')) { await clickLabel(page, 'Continue'); await sleep(300); }
  if (workspace) {
    await until(() => clickLabel(page, 'Choose workspace'), 30000, '"Choose workspace"');
    await until(async () => (await bodyText(page)).includes('Select Workspace Directory'), 15000, 'the workspace picker');
    await until(async () => { // "Open" does nothing until the picker has listed $HOME: press it until it closes
      if ((await bodyText(page)).includes('Select Workspace Directory')) { await clickLabel(page, 'Open'); await sleep(500); return false; }
      return page.$('[contenteditable=true]');
    }, 30000, 'the picker to open $HOME and the composer');
    return { opened: 'workspace' };
  }
  const row = '[role=tree][aria-label=Sessions] [data-row-key^="session:"]';
  await page.waitForSelector(row, { timeout: 30000 });
  // the session's own row (a fresh start also lists a "New Session" draft)
  const rows = await page.$$eval(row, (rs) => rs.map((r) => r.innerText.split('\n')[0].trim()));
  const at = rows.findIndex((t) => t !== 'New Session');
  if (at < 0) throw new Error(`no session in the sidebar: ${JSON.stringify(rows)}`);
  await (await page.$$(row))[at].click();
  await page.waitForSelector('[data-chat-flow-kind]', { timeout: 30000 });
  await sleep(1000); // the session's log is replayed into the view
  return { opened: 'session', sessions: rows };
}

async function send({ name, text }) {
  const { page } = get(name);
  await page.waitForSelector('[contenteditable=true]', { timeout: 30000 });
  await page.click('[contenteditable=true]');
  await page.keyboard.type(text);
  await sleep(150);
  await page.keyboard.press('Enter');
  return {};
}

const counts = (page) => page.evaluate(() => ({
  tails: [...document.querySelectorAll('[data-chat-flow-kind=turn-tail]')].length,
  working: [...document.querySelectorAll('[data-chat-flow-kind=turn-process]')].filter((e) => !/Completed|Failed|Interrupted/.test(e.innerText)).length,
  // a finished command row reads "compact · <its result>" (Compacted N history items, or why not)
  // a command row shows its outcome once done: "compact · Compacted N history items", or why not
  compactions: [...document.querySelectorAll('[data-chat-flow-kind=manual-compaction]')]
    .filter((e) => !/^(|Running.*|Working.*)$/.test(e.innerText.replace(/\s+/g, ' ').trim().replace(/^compact\b\s*/, ''))).length,
}));

async function settled({ names, tails, compactions = 0, timeoutMs = 60000 }) {
  const out = {};
  await Promise.all(names.map(async (name) => {
    const { page } = get(name);
    const t0 = Date.now();
    await until(async () => {
      const c = await counts(page);
      return c.tails >= tails && c.working === 0 && c.compactions >= compactions;
    }, timeoutMs, `${name}: ${tails} finished turns, ${compactions} compactions`);
    out[name] = Date.now() - t0;
  }));
  return out;
}

// The Chat as a person reads it: every flow item in order, with what it shows
const chatItems = (page) => page.evaluate(() => [...document.querySelectorAll('[data-chat-flow-kind]')].map((e) => {
  const fold = [...e.querySelectorAll('button[aria-expanded]')].find((b) => /^(Completed|Failed|Interrupted)/.test(b.innerText.trim()));
  const bubble = e.querySelector('[data-slot="conversation.user.text.node"]');
  const visible = e.getBoundingClientRect().height > 0 && e.innerText.trim() !== '';
  return {
    kind: e.dataset.chatFlowKind, turn: e.dataset.chatTurn ? Number(e.dataset.chatTurn) : null,
    text: (bubble ? bubble.innerText : e.innerText).trim(), visible,
    fold: fold ? fold.getAttribute('aria-expanded') : null,
    usage: (e.innerText.match(/Usage\s+([\d.]+[KM]?)\s+tok/) || [null, null])[1],
  };
}));

async function tab(page, label) {
  await clickLabel(page, label);
  await page.waitForSelector(label === 'Trajectory' ? 'tr[data-kind]' : '[data-chat-flow-kind]', { timeout: 15000 });
  await sleep(400);
}

async function view({ name, shot }) {
  const { page, errors } = get(name);
  await tab(page, 'Chat');
  const chat = await chatItems(page);
  const header = await page.evaluate(() => {
    const h = document.querySelector('[data-slot="conversation.session.header"]');
    const b = [...document.querySelectorAll('button')].find((x) => /^\d+ subagents?$/.test(x.innerText.trim()));
    return { text: h ? h.innerText.replace(/\s+/g, ' ').trim() : '', subagents: b ? b.innerText.trim() : null };
  });
  if (shot) {
    await page.screenshot({ path: `${shot}-chat.png` });
    const box = await page.evaluate(() => { // the conversation column alone, for side-by-side pictures
      const r = document.querySelector('[data-chat-flow]').getBoundingClientRect();
      return { x: Math.max(0, r.left - 16), y: Math.max(0, r.top - 8), width: r.width + 32, height: Math.min(r.height + 16, 1900) };
    });
    await page.screenshot({ path: `${shot}-column.png`, clip: box });
  }
  await tab(page, 'Trajectory');
  const trajectory = await page.evaluate(() => [...document.querySelectorAll('tr[data-kind]')].map((r) => {
    const label = r.querySelector('[class*=turnLabel]');
    return {
      kind: r.dataset.kind, turnStart: r.dataset.turnStart === 'true',
      label: label ? label.innerText.split('\n')[0].trim() : (r.dataset.turnStart === 'true' ? r.innerText.split('\n')[0].trim() : null),
      text: r.innerText.replace(/\s+/g, ' ').trim().slice(0, 400),
    };
  }));
  if (shot) await page.screenshot({ path: `${shot}-trajectory.png` });
  await tab(page, 'Chat');
  return { chat, header, trajectory, pageErrors: errors.slice() };
}

async function subagents({ name, shot }) {
  const { page } = get(name);
  await tab(page, 'Chat');
  const opened = await page.evaluate(() => {
    const b = [...document.querySelectorAll('button')].find((x) => /^\d+ subagents?$/.test(x.innerText.trim()));
    if (b) b.click();
    return b ? b.innerText.trim() : null;
  });
  if (!opened) return { button: null, entries: [] };
  const tree = '[role=tree][aria-label="Subagent sessions"] [role=treeitem]';
  await page.waitForSelector(tree, { timeout: 10000 });
  await sleep(400);
  const entries = await page.$$eval(tree, (rs) => rs.map((r) => r.innerText.replace(/\s+/g, ' ').trim()));
  if (shot) { // the header's trigger and its menu
    const clip = await page.evaluate((label) => {
      const menu = document.querySelector('[role=tree][aria-label="Subagent sessions"]').parentElement.getBoundingClientRect();
      const b = [...document.querySelectorAll('button')].find((x) => x.innerText.trim() === label).getBoundingClientRect();
      const x = Math.max(0, Math.min(menu.left, b.left) - 24), y = Math.max(0, Math.min(menu.top, b.top) - 12);
      return { x, y, width: Math.max(menu.right, b.right) + 24 - x, height: Math.max(menu.bottom, b.bottom) + 16 - y };
    }, opened);
    await page.screenshot({ path: `${shot}-subagents-menu.png`, clip });
  }
  await page.click(`${tree} [class*=clickarea]`);
  await sleep(2000);
  const worker = {
    crumbs: await page.evaluate(() => (document.querySelector('nav[aria-label="Session hierarchy"]') || {}).innerText || ''),
    chat: await chatItems(page),
    composer: !!(await page.$('[contenteditable=true]')),
  };
  if (shot) await page.screenshot({ path: `${shot}-subagent-chat.png` });
  await page.evaluate(() => document.querySelector('nav[aria-label="Session hierarchy"] button')?.click());
  await sleep(1500);
  return { button: opened, entries, worker };
}

// one picture of several, side by side under their titles (stock vs turn-memory)
async function compose({ images, titles, out, scale = 1 }) {
  const page = await browser.newPage();
  const cells = images.map((file, i) => {
    const png = readFileSync(file);
    const width = Math.round(png.readUInt32BE(16) * scale); // the PNG's IHDR width
    return `<figure><figcaption>${titles[i]}</figcaption>`
      + `<img style="width:${width}px" src="data:image/png;base64,${png.toString('base64')}"></figure>`;
  }).join('');
  await page.setContent(`<html><head><style>
    body { margin: 0; background: #fff; font: 600 18px sans-serif; display: flex; align-items: flex-start; }
    figure { margin: 0; border-left: 2px solid #ddd; } figure:first-child { border: 0; }
    figcaption { padding: 10px 16px; }</style></head><body>${cells}</body></html>`);
  await page.screenshot({ path: out, fullPage: true });
  await page.close();
  return { out };
}

async function close({ name }) {
  const p = pages.get(name);
  if (p) { pages.delete(name); await p.context.close(); }
  return {};
}

const handlers = { open, send, settled, view, subagents, compose, close };
const reply = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
reply({ id: 0, ok: true, result: { browser: await browser.version() } });
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const msg = JSON.parse(line);
  if (msg.cmd === 'quit') break;
  try {
    reply({ id: msg.id, ok: true, result: await handlers[msg.cmd](msg) });
  } catch (e) {
    const shots = []; // every page the command was about, as it is now
    for (const name of msg.names ?? (msg.name ? [msg.name] : [])) {
      const p = pages.get(name);
      const path = join(process.env.WEBUI_ARTIFACTS ?? '.', `error-${msg.id}-${msg.cmd}-${name}.png`);
      if (p && await p.page.screenshot({ path }).then(() => true, () => false)) shots.push(path);
    }
    reply({ id: msg.id, ok: false, error: String(e.stack || e), shots });
  }
}
await browser.close();

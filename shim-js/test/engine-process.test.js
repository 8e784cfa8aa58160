// EngineProcess: starts the engine on a private endpoint, restarts it when it dies (backing
// off until a handshake succeeds), kills a hung one on request, and stops for good on stop().
// The engine here is fixtures/fake-engine.mjs, run by this very node.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, linkSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join } from 'node:path';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { EngineProcess } from '../lib/engine-process.js';

const FAKE_ENGINE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'fake-engine.mjs');

/** An EngineProcess running the fake engine in `mode`, with everything it reports recorded. */
function engineProcess(t, mode, { restartDelayMs = 20, transport = 'ipc', command, onReady, removeDir } = {}) {
  const seen = { ready: [], exits: [], delays: [], warnings: [], engines: [], argv: [], launchers: [] };
  const proc = new EngineProcess({
    command: command ?? [process.execPath, FAKE_ENGINE, mode],
    transport,
    restartDelayMs,
    removeDir,
    logger: {
      info(line) {
        const found = /^fake engine pid=(\d+) secret=(\S*)$/.exec(line);
        if (found) seen.engines.push({ pid: Number(found[1]), secret: found[2] });
        const argv = /^fake engine argv=(.*)$/.exec(line);
        if (argv) seen.argv.push(JSON.parse(argv[1]));
        const launcher = /^fake launcher pid=(\d+) child=(\d+)$/.exec(line);
        if (launcher) seen.launchers.push({ pid: Number(launcher[1]), child: Number(launcher[2]) });
      },
      warn(line) {
        seen.warnings.push(line);
        const found = /restarting in (\d+) ms/.exec(line);
        if (found) seen.delays.push(Number(found[1]));
      },
    },
    onReady: (endpoint, secret) => {
      seen.ready.push({ endpoint, secret });
      onReady?.(proc);
    },
    onExit: (why) => seen.exits.push(why),
  });
  t.after(() => proc.stop());
  return { proc, seen };
}

async function until(predicate, what, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function running(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('EngineProcess', () => {
  test('the engine gets a private ipc endpoint (a 0700 dir) and the per-run secret; onReady passes both on', async (t) => {
    const { proc, seen } = engineProcess(t, 'serve');
    proc.start();
    await until(() => seen.ready.length === 1 && seen.engines.length === 1, 'READY');
    const [{ endpoint, secret }] = seen.ready;
    assert.ok(endpoint.startsWith('ipc://'), endpoint);
    const socket = endpoint.slice('ipc://'.length); // a native path: backslashes on Windows
    assert.equal(basename(socket), `engine-${process.pid}.sock`);
    const dir = dirname(socket);
    assert.equal(dirname(dir), tmpdir());
    // Windows has no mode bits: there the user's own temp folder's ACL keeps others out
    if (process.platform !== 'win32') assert.equal(statSync(dir).mode & 0o777, 0o700);
    assert.match(secret, /^[0-9a-f]{48}$/);
    assert.equal(seen.engines[0].secret, secret, 'the secret the engine was given is the one onReady reports');
    assert.equal(proc.alive, true);
    proc.stop();
    assert.equal(proc.alive, false);
    assert.equal(existsSync(dir), false, 'stop() removes the socket directory');
    await until(() => !running(seen.engines[0].pid), 'the engine to exit once its stdin closed', 5000);
  });

  test("tcp transport: the engine binds 127.0.0.1 on a port of its choosing", async (t) => {
    const { proc, seen } = engineProcess(t, 'serve', { transport: 'tcp' });
    proc.start();
    await until(() => seen.ready.length === 1, 'READY');
    assert.equal(seen.ready[0].endpoint, 'tcp://127.0.0.1:*');
  });

  test('an engine that dies before its handshake is restarted with a doubling delay', async (t) => {
    const { proc, seen } = engineProcess(t, 'die');
    proc.start();
    await until(() => seen.delays.length >= 5, 'five restarts');
    proc.stop();
    assert.deepEqual(seen.delays.slice(0, 5), [20, 40, 80, 160, 320]);
    assert.ok(seen.exits.slice(0, 4).every((why) => why === 'exited with code 3'), String(seen.exits));
    assert.match(seen.warnings[0], /^turn-memory engine exited with code 3; restarting in 20 ms \(the agent keeps running without it\)$/);
  });

  test('a completed handshake (healthy()) starts the delay over', async (t) => {
    // as the shim does once a handshake succeeded (not on READY)
    const { proc, seen } = engineProcess(t, 'die', { onReady: (p) => p.healthy() });
    proc.start();
    await until(() => seen.delays.length >= 5, 'five restarts');
    proc.stop();
    assert.deepEqual(seen.delays.slice(0, 5), [20, 20, 20, 20, 20]);
    assert.ok(seen.ready.length >= 5);
  });

  test('the restart delay stops growing at 30 s', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] }); // the restart timers; the engines are real
    const { proc, seen } = engineProcess(t, 'die', { restartDelayMs: 12000 });
    const settle = async (count) => {
      // mocked setTimeout: poll on immediates until the engine has died `count` times
      const deadline = Date.now() + 15000;
      while (seen.delays.length < count) {
        if (Date.now() > deadline) throw new Error(`no restart #${count}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    proc.start();
    for (let i = 1; i <= 3; i++) {
      await settle(i);
      t.mock.timers.tick(seen.delays.at(-1));
    }
    await settle(4);
    proc.stop();
    assert.deepEqual(seen.delays, [12000, 24000, 30000, 30000]);
  });

  test('recycle() kills a hung engine and it is restarted', async (t) => {
    const { proc, seen } = engineProcess(t, 'hang');
    proc.start();
    await until(() => seen.ready.length === 1 && seen.engines.length === 1, 'READY');
    const hung = seen.engines[0].pid;
    proc.recycle('stopped answering (turn.preStep)');
    await until(() => seen.ready.length === 2 && seen.engines.length === 2, 'the restarted engine');
    assert.equal(running(hung), false);
    assert.notEqual(seen.engines[1].pid, hung);
    assert.deepEqual(seen.exits, ['killed by SIGTERM']);
    assert.deepEqual(seen.warnings.slice(0, 2), [
      'turn-memory engine stopped answering (turn.preStep); recycling it',
      'turn-memory engine killed by SIGTERM; restarting in 20 ms (the agent keeps running without it)',
    ]);
  });

  test('stop() prevents restarts: of an engine about to die, and of one whose restart is pending', async (t) => {
    const running = engineProcess(t, 'die');
    running.proc.start();
    await until(() => running.seen.ready.length === 1, 'READY');
    running.proc.stop(); // before it dies
    const pending = engineProcess(t, 'die', { restartDelayMs: 300 });
    pending.proc.start();
    await until(() => pending.seen.delays.length === 1, 'the first exit');
    pending.proc.stop(); // its restart is scheduled
    await sleep(600);
    assert.equal(running.seen.engines.length, 1, 'no engine was started again');
    assert.deepEqual(running.seen.exits, [], 'a stopped engine is let go: its exit is not reported');
    assert.deepEqual(running.seen.delays, []);
    assert.equal(pending.seen.engines.length, 1, 'the pending restart started no engine');
    assert.deepEqual(pending.seen.delays, [300]);
    assert.equal(pending.proc.alive, false);
  });

  test('start() while running starts no second engine; start() after stop() starts none', async (t) => {
    const { proc, seen } = engineProcess(t, 'serve');
    proc.start();
    proc.start();
    await until(() => seen.ready.length === 1, 'READY');
    await sleep(200);
    assert.equal(seen.engines.length, 1);
    proc.stop();
    proc.start();
    proc.recycle('a late recycle');
    await sleep(300);
    assert.equal(seen.engines.length, 1);
    assert.equal(proc.alive, false);
  });

  test('stop() kills an engine that ignores its stdin closing (within 2 s) and ignores a READY it prints after', async (t) => {
    const { proc, seen } = engineProcess(t, 'late');
    proc.start();
    await until(() => seen.engines.length === 1, 'the engine to start');
    proc.stop();
    const { pid } = seen.engines[0];
    const stopped = Date.now();
    await until(() => !running(pid), 'the engine to be killed', 5000);
    assert.ok(Date.now() - stopped < 4000);
    assert.deepEqual(seen.ready, [], 'its READY (at 300 ms) opened nothing');
    assert.deepEqual(seen.exits, []);
  });

  test('an engine command with spaces, quotes and non-ASCII characters reaches the engine exactly', async (t) => {
    // what `turn-memory install` records on Windows, e.g. C:\Users\张伟\My Envs\tm\Scripts\python.exe
    const dir = mkdtempSync(join(tmpdir(), 'tm engine ü 张伟 '));
    const exe = join(dir, `node runtime ü${extname(process.execPath)}`);
    try {
      // Windows cannot delete a link to the image of a running process (this very node): copy there
      if (process.platform === 'win32') throw new Error('copy');
      linkSync(process.execPath, exe);
    } catch {
      copyFileSync(process.execPath, exe);
    }
    const script = join(dir, 'fake engine 引擎.mjs');
    copyFileSync(FAKE_ENGINE, script);
    const extra = ['C:\\Program Files\\Python 3.12\\', 'say "hi" ü 张伟', ''];
    const { proc, seen } = engineProcess(t, 'serve', { command: [exe, script, 'serve', ...extra] });
    proc.start();
    await until(() => seen.ready.length === 1 && seen.argv.length === 1 && seen.engines.length === 1, 'READY');
    assert.deepEqual(seen.argv[0], extra);
    proc.stop();
    // Windows cannot delete the executable of a running process
    await until(() => !running(seen.engines[0].pid), 'the engine to exit', 5000);
    rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
  });

  test('recycle() also stops an engine a launcher started: its stdin closes, no signal reaches it', async (t) => {
    // a venv's python.exe on Windows starts the real interpreter as its child
    const { proc, seen } = engineProcess(t, 'launch');
    proc.start();
    await until(() => seen.ready.length === 1 && seen.engines.length === 1 && seen.launchers.length === 1, 'READY');
    const [{ pid: engine }] = seen.engines;
    assert.equal(seen.launchers[0].child, engine);
    proc.recycle('stopped answering (turn.preStep)');
    await until(() => !running(engine), 'the launched engine to exit', 5000);
    await until(() => seen.engines.length === 2 && seen.ready.length === 2, 'the restarted engine');
    assert.equal(running(seen.launchers[0].pid), false);
  });

  test('stop() does not throw when the socket directory cannot be removed (a file the engine still holds on Windows)', async (t) => {
    const removed = [];
    const { proc, seen } = engineProcess(t, 'serve', {
      removeDir: (dir) => {
        removed.push(dir);
        throw Object.assign(new Error(`EBUSY: resource busy or locked, rmdir '${dir}'`), { code: 'EBUSY' });
      },
    });
    proc.start();
    await until(() => seen.ready.length === 1, 'READY');
    proc.stop();
    assert.equal(removed.length, 1);
    assert.deepEqual(seen.warnings, [`turn-memory engine: could not remove ${removed[0]}: EBUSY: resource busy or locked, rmdir '${removed[0]}'`]);
    rmSync(removed[0], { recursive: true, force: true });
  });

  test('a command that cannot be started is retried with the backoff', async (t) => {
    const { proc, seen } = engineProcess(t, 'serve', { command: [join(tmpdir(), 'no-such-turn-memory'), 'serve'] });
    proc.start();
    await until(() => seen.delays.length >= 1, 'a restart', 1000);
    assert.equal(proc.alive, false);
  });
});

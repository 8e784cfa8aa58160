// Starts the Python engine (`turn-memory serve`) on a private endpoint and restarts it
// when it dies. ipc sockets live in a fresh 0700 directory; where ipc is unavailable
// (Windows) the engine binds tcp on 127.0.0.1 with a random port. Either way the engine
// only accepts a client that presents the per-run secret in its handshake.
//
// Stopping needs no POSIX signal: the engine exits when its stdin closes (and on its own a
// few seconds later if it hangs). Node closes the child's stdin once the child exits, so a
// kill (TerminateProcess on Windows) of a launcher (a venv's python.exe, a pip entry point)
// also stops the Python it started, which the kill itself may not reach.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const READY = 'TURN_MEMORY_READY ';

export class EngineProcess {
  #child;
  #dir;
  #restartTimer;
  #attempt = 0;
  #stopped = false;

  /**
   * @param opts.command argv of the engine, e.g. ['turn-memory', 'serve']
   * @param opts.transport 'auto' | 'ipc' | 'tcp'
   * @param opts.onReady (endpoint, secret) => void
   * @param opts.onExit (description) => void
   * @param opts.removeDir (dir) => void, removes the ipc socket's directory (tests replace it)
   */
  constructor(opts) {
    this.opts = opts;
  }

  get alive() {
    return this.#child !== undefined;
  }

  start() {
    if (this.#stopped || this.#child) return;
    const { command, transport, logger } = this.opts;
    // any value but 'ipc' and 'tcp' acts as 'auto': the engine names a bad one in its handshake
    const useTcp = transport === 'tcp' || (transport !== 'ipc' && process.platform === 'win32');
    const secret = randomBytes(24).toString('hex');
    let endpoint = 'tcp://127.0.0.1:*';
    if (!useTcp) {
      this.#dir ??= mkdtempSync(join(tmpdir(), 'tm-')); // mkdtemp creates it 0700
      endpoint = `ipc://${join(this.#dir, `engine-${process.pid}.sock`)}`;
    }
    const [file, ...args] = command;
    let child;
    try {
      child = spawn(file, [...args, '--endpoint', endpoint], {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, TURN_MEMORY_SECRET: secret },
        windowsHide: true,
      });
    } catch (error) {
      this.#scheduleRestart(`could not start ${file}: ${error.message}`);
      return;
    }
    this.#child = child;
    child.on('error', (error) => {
      logger.warn(`turn-memory engine: ${error.message}`);
      // a command that could not start (ENOENT…) emits no 'exit': treat it as one
      if (child.pid === undefined && this.#child === child) {
        this.#child = undefined;
        this.opts.onExit(`could not start ${file}`);
        this.#scheduleRestart(`could not start ${file}: ${error.message}`);
      }
    });
    createInterface({ input: child.stdout }).on('line', (line) => {
      // a READY from an engine we already stopped or replaced must not open a socket
      if (line.startsWith(READY) && this.#child === child && !this.#stopped) {
        this.opts.onReady(line.slice(READY.length).trim(), secret);
      }
    });
    createInterface({ input: child.stderr }).on('line', (line) => logger.info(line));
    child.on('exit', (code, signal) => {
      if (this.#child !== child) return;
      this.#child = undefined;
      const why = signal ? `killed by ${signal}` : `exited with code ${code}`;
      this.opts.onExit(why);
      this.#scheduleRestart(why);
    });
  }

  #scheduleRestart(why) {
    if (this.#stopped) return;
    const delay = Math.min(this.opts.restartDelayMs * 2 ** this.#attempt++, 30000);
    this.opts.logger.warn(`turn-memory engine ${why}; restarting in ${delay} ms (the agent keeps running without it)`);
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => this.start(), delay);
    this.#restartTimer.unref?.();
  }

  /**
   * The engine completed its handshake: the next crash restarts after the first delay again.
   * Not on READY: an engine that boots and then fails its handshake must back off too.
   */
  healthy() {
    this.#attempt = 0;
  }

  /** Kill a hung engine; the exit handler restarts it. */
  recycle(why) {
    this.opts.logger.warn(`turn-memory engine ${why}; recycling it`);
    this.#child?.kill();
  }

  stop() {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    const child = this.#child;
    this.#child = undefined;
    if (child) {
      child.stdin.end(); // the engine exits when its stdin closes
      // DSH must not wait for the engine's interpreter teardown (~0.1-0.2 s after EOF): stop
      // holding its process and pipes open; one still running when DSH exits is killed then
      child.unref();
      child.stdout?.unref?.();
      child.stderr?.unref?.();
      const kill = () => child.kill();
      process.once('exit', kill);
      child.once('exit', () => process.removeListener('exit', kill));
      setTimeout(kill, 2000).unref?.();
    }
    if (this.#dir) {
      try {
        (this.opts.removeDir ?? ((dir) => rmSync(dir, { recursive: true, force: true })))(this.#dir);
      } catch (error) {
        // Windows refuses to delete a socket file the exiting engine still holds; the OS
        // temp dir is cleaned up later, and stop() (DSH unloading the plugin) must not throw
        this.opts.logger.warn(`turn-memory engine: could not remove ${this.#dir}: ${error.message}`);
      }
    }
  }
}

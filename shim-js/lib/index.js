// turn-memory for DSH: the compaction engine DSH loads is this thin shim. It forwards
// hooks, session events and `/compact` to the Python engine and executes what the engine
// answers. It decides nothing: while the engine is down every hook fails open (the agent
// runs as if no compaction engine were loaded) and `/compact` reports a clear error.
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { CompactionEngine, ManualCompactionError } from '@deepseek-ai/dsh-compaction';

import { Bridge, EngineCallError } from './bridge.js';
import { EngineProcess } from './engine-process.js';
import { registerHooks } from './hooks.js';
import { HostOps } from './host-ops.js';
import { probeHost } from './host-probe.js';
import { Mirror } from './mirror.js';
import { PublicTools, routeOf } from './public-tools.js';
import { engineSettings, withDefaults } from './settings.js';
import { Workers } from './workers.js';

export const name = 'dsh-turn-memory';

/**
 * Standard Schema (what cordis runs on row config), without a schema library. It refuses
 * nothing: the engine validates every key in its handshake, and a refusal there names the key
 * and turns the plugin off for this config (see `_connect`).
 */
const Config = {
  '~standard': {
    version: 1,
    vendor: 'turn-memory',
    validate: (value) => ({ value: withDefaults(value) }),
  },
};

function hostVersion() {
  try {
    return createRequire(import.meta.url)('@deepseek-ai/dsh-compaction/package.json').version;
  } catch {
    return 'unknown';
  }
}

export default class TurnMemoryEngine extends CompactionEngine {
  static inject = ['llm', 'sessions'];
  static Config = Config;

  // No `#private` members: cordis hands methods a proxy of the service, which private
  // fields reject ("Receiver must be an instance of class").
  _timeouts = 0;
  _waiters = [];
  // why the engine refused the handshake; set: turn-memory is off for this plugin instance
  _refused = undefined;
  /** what the last handshake said the hooks should do (hooks.js reads it) */
  handshake = {
    skipSubagents: true,
    preStepTimeoutMs: 2000,
    // does a pre-step wait for a booting engine? Only with the landing barrier: the last
    // handshake's word, and before the first one the row's own setting (the engine default is off)
    bootWait: false,
  };
  /** agent -> "turn:step" whose agent/request the engine asked to be called from */
  atRequest = new WeakMap();
  /** agent -> the input messages of that step (the array the loop appends after agent/request) */
  stepInput = new WeakMap();

  constructor(ctx, config = {}) {
    super(ctx);
    const row = withDefaults(config);
    const { settings, unusable } = engineSettings(row);
    this.settings = settings;
    if (unusable.length) {
      ctx.logger.warn(`turn-memory: ${unusable.join(', ')} cannot be used as given; the engine starts with the `
        + 'default and checks the config in its handshake');
    }
    const policy = typeof row === 'object' && row !== null && !Array.isArray(row) ? row : {};
    this.handshake.bootWait = policy.turns?.landingBarrier === true && policy.turns?.enabled !== false;
    const { checkpointSource, ...host } = probeHost();
    this.hello = {
      dshVersion: hostVersion(), host, pid: process.pid, checkpointSource,
      // where the engine keeps a finished turn's compression until it lands (a sidecar, never a session event)
      dshHome: process.env.DSH_HOME || join(homedir(), '.dsh'),
      // the whole row config (engine defaults filled in, bad values as given): the engine validates every key
      config: row,
    };
    this.bridge = new Bridge({
      onCall: (method, params, payload, io) => this.host.handle(method, params, payload, io),
      beforeSend: () => this.mirror.flush(),
      onLost: (why) => this._lost(why),
      onTimeout: (method) => this._timedOut(method),
    });
    this.mirror = new Mirror(this.bridge);
    this.workers = new Workers(ctx, this.mirror, (method, params) => this.callEngine(method, params, { timeoutMs: this.settings.hookTimeoutMs }));
    this.host = new HostOps(ctx, this.mirror, this.workers);
    // a memory tool called while the engine boots waits for it (bounded): the call cannot be
    // answered otherwise, and no step waits for a booting engine any more
    this.publicTools = new PublicTools(ctx, async (method, params) => {
      await this.whenStarted();
      return this.callEngine(method, params, { timeoutMs: this.settings.manualTimeoutMs, liveness: this.liveness() });
    });
    this.process = new EngineProcess({
      command: settings.logFile ? [...settings.command, '--log-file', settings.logFile] : settings.command,
      transport: settings.transport,
      restartDelayMs: settings.restartDelayMs,
      logger: ctx.logger,
      onReady: (endpoint, secret) => this._connect(endpoint, secret),
      onExit: () => this.bridge.close('exited'),
    });
    registerHooks(ctx, this);
    ctx.effect(() => {
      this.process.start();
      return () => {
        this.bridge.dispose();
        this.process.stop();
        for (const wake of this._waiters.splice(0)) wake();
      };
    }, 'turn-memory engine');
  }

  async _connect(endpoint, secret) {
    try {
      const { result } = await this.bridge.open(endpoint, { ...this.hello, secret }, this.settings.startTimeoutMs);
      this.mirror.elide = result?.elide ?? [];
      this.mirror.elideExcept = result?.elideExcept ?? [];
      this.handshake.skipSubagents = result?.skipSubagents ?? true;
      this.workers.snapshotSources = result?.snapshotSources ?? [];
      this.workers.shadowContexts = result?.workerShadowContexts ?? [];
      this.workers.snapshotFirst = result?.workerSnapshotFirst ?? false;
      this.handshake.preStepTimeoutMs = result?.preStepTimeoutMs ?? this.settings.hookTimeoutMs;
      this.handshake.bootWait = result?.bootWait ?? false;
      this._timeouts = 0;
      this.process.healthy(); // only now may the restart backoff start over
      this.publicTools.configure(result ?? {}, [...this.mirror.tracked.values()].map((e) => e.agent));
      this.ctx.logger.info(`turn-memory engine ready (${result?.dialect} dialect, DSH ${this.hello.dshVersion})`);
      this.mirror.resetAll();
      for (const wake of this._waiters.splice(0)) wake();
    } catch (error) {
      if (error instanceof EngineCallError) {
        // The engine answered with a refusal (a bad config key, a dialect or protocol
        // mismatch): a restart would be refused the same way. Say it once, stop the engine,
        // keep the agent running without it. The config is read when DSH constructs this
        // plugin, so only a new construction (a changed row, a DSH restart) starts it again.
        this._refused = `${error.message}${error.fix ? `; fix: ${error.fix}` : ''}`;
        const line = `turn-memory is off: the engine refused the handshake (${error.code}): ${this._refused}. `
          + 'It is not restarted until this config changes; the agent runs without turn-memory.';
        this.ctx.logger.warn(line);
        // DSH keeps plugin logs in memory only (no exporter in headless mode); a setting that
        // silently switches turn-memory off must reach the user, once, as DSH's own warnings do
        process.stderr.write(`${line}\n`);
        this.bridge.close('refused');
        this.process.stop();
        // tools only the engine can answer are withdrawn (and not pre-registered on the next start)
        this.publicTools.configure({}, [...this.mirror.tracked.values()].map((e) => e.agent));
        for (const wake of this._waiters.splice(0)) wake();
        return;
      }
      this.ctx.logger.warn(`turn-memory engine handshake failed: ${error.message}; continuing without it`);
      this.process.recycle('failed its handshake');
    }
  }

  _lost(why) {
    this.ctx.logger.warn(`turn-memory engine connection lost: ${why}`);
    this.bridge.close('lost');
    // only a new engine reconnects (and resyncs): the one behind a broken stream is replaced
    this.process.recycle(`lost its connection (${why})`);
  }

  _timedOut(method) {
    if (++this._timeouts >= this.settings.recycleAfterTimeouts) {
      this._timeouts = 0;
      this.process.recycle(`stopped answering (${method})`);
    }
  }

  async callEngine(method, params, opts) {
    const answer = await this.bridge.call(method, params, opts);
    this._timeouts = 0;
    return answer.result;
  }

  /** Long calls ping the engine every `livenessMs` (5 s); twice that without an answer means it hung. */
  liveness() {
    const every = this.settings.livenessMs;
    return { everyMs: every, withinMs: Math.max(this.settings.hookTimeoutMs, 2 * every) };
  }

  /** Pressure/overflow policy lives in the engine; unavailable engine = no compaction. */
  async compactIfNeeded(agent, trigger, signal) {
    if (!this.bridge.ready || signal?.aborted) return null;
    try {
      return await this.callEngine('compact.ifNeeded', {
        sessionId: agent.session.id, logLength: agent.session.seq, trigger, agentOptions: routeOf(agent),
      }, { timeoutMs: this.settings.manualTimeoutMs, signal, liveness: this.liveness() }); // may run a whole compaction
    } catch (error) {
      this.ctx.logger.warn(`turn-memory compactIfNeeded skipped: ${error.message}`);
      return null;
    }
  }

  async compactRegion(start, end, agent, signal) {
    return this.callEngine('compact.region', {
      sessionId: agent.session.id, logLength: agent.session.seq, start, end, agentOptions: routeOf(agent),
    }, { timeoutMs: this.settings.manualTimeoutMs, signal });
  }

  compactNow(agent, signal, sourceCommandId) {
    signal.throwIfAborted();
    try {
      return agent.runMaintenance((agentSignal) => this._manual(agent, AbortSignal.any([agentSignal, signal]), sourceCommandId));
    } catch (error) {
      throw new ManualCompactionError('busy', 'manual compaction requires an idle agent with no waking queued work', { cause: error });
    }
  }

  /** An engine that is still booting is worth a bounded wait; a dead one is not. */
  async whenStarted() {
    if (this.bridge.ready || !this.process.alive) return;
    let timer;
    await Promise.race([
      new Promise((resolve) => this._waiters.push(resolve)),
      new Promise((resolve) => { timer = setTimeout(resolve, this.settings.startTimeoutMs); }),
    ]);
    clearTimeout(timer);
  }

  async _manual(agent, signal, sourceCommandId) {
    const sessionId = agent.session.id;
    await this.whenStarted();
    if (this._refused) {
      throw new ManualCompactionError('busy', `turn-memory is off: the engine refused its config (${this._refused}); the conversation is unchanged`);
    }
    if (!this.bridge.ready) {
      throw new ManualCompactionError('busy', 'the turn-memory engine is unavailable (it is starting or restarting); the conversation is unchanged');
    }
    if (!this.mirror.entry(sessionId)) this.mirror.track(agent);
    this.host.maintenance.set(sessionId, signal);
    try {
      const result = await this.callEngine('compact.now', {
        sessionId, logLength: agent.session.seq, sourceCommandId, agentOptions: routeOf(agent),
      }, { timeoutMs: this.settings.manualTimeoutMs, signal, liveness: this.liveness() });
      // older history too small to fold is a result, not an error: DSH's /compact says there is
      // nothing to compact; the engine's reason (with the size) goes to DSH's log
      if (result?.skipped) {
        this.ctx.logger.info(`turn-memory /compact: ${result.skipped}; nothing changed`);
        return null;
      }
      return result;
    } catch (error) {
      if (error instanceof ManualCompactionError) throw error;
      if (signal.aborted) throw new ManualCompactionError('cancelled', 'manual compaction was cancelled', { cause: error });
      if (error instanceof EngineCallError && error.manual) throw new ManualCompactionError(error.manual, error.message, { cause: error });
      throw new ManualCompactionError('busy', `the turn-memory engine could not compact: ${error.message}; the conversation is unchanged`, { cause: error });
    } finally {
      this.host.maintenance.delete(sessionId);
    }
  }
}

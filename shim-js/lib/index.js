// turn-memory for DSH: the compaction engine DSH loads is this thin shim. It forwards
// hooks, session events and `/compact` to the Python engine and executes what the engine
// answers. It decides nothing: while the engine is down every hook fails open (the agent
// runs as if no compaction engine were loaded) and `/compact` reports a clear error.
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { CompactionEngine, ManualCompactionError } from '@deepseek-ai/dsh-compaction';

import { Bridge, EngineCallError } from './bridge.js';
import { ENGINE_DEFAULTS } from './defaults.js';
import { EngineProcess } from './engine-process.js';
import { HostOps } from './host-ops.js';
import { probeHost } from './host-probe.js';
import { Mirror } from './mirror.js';
import { PublicTools, routeOf } from './public-tools.js';
import { Workers, isSnapshot, isWorker } from './workers.js';

export const name = 'dsh-turn-memory';

/** Standard Schema (what cordis validates row config with), without a schema library. */
const Config = {
  '~standard': {
    version: 1,
    vendor: 'turn-memory',
    validate(value) {
      const config = value ?? {};
      const issues = [];
      if (typeof config !== 'object' || Array.isArray(config)) return { issues: [{ message: 'config must be an object' }] };
      const engine = config.engine ?? {};
      if (typeof engine !== 'object' || Array.isArray(engine)) issues.push({ message: 'engine must be an object', path: ['engine'] });
      else {
        if (engine.command !== undefined && (!Array.isArray(engine.command) || engine.command.length === 0 || engine.command.some((a) => typeof a !== 'string'))) {
          issues.push({ message: 'engine.command must be a non-empty array of strings', path: ['engine', 'command'] });
        }
        if (engine.transport !== undefined && !['auto', 'ipc', 'tcp'].includes(engine.transport)) {
          issues.push({ message: "engine.transport must be 'auto', 'ipc' or 'tcp'", path: ['engine', 'transport'] });
        }
        if (engine.logFile !== undefined && typeof engine.logFile !== 'string') {
          issues.push({ message: 'engine.logFile must be a path', path: ['engine', 'logFile'] });
        }
        for (const key of ['startTimeoutMs', 'hookTimeoutMs', 'manualTimeoutMs', 'restartDelayMs', 'recycleAfterTimeouts']) {
          if (engine[key] !== undefined && !(Number.isFinite(engine[key]) && engine[key] >= 0)) {
            issues.push({ message: `engine.${key} must be a non-negative number`, path: ['engine', key] });
          }
        }
      }
      if (issues.length) return { issues };
      // Everything but `engine` is the engine's own policy config, validated in Python.
      return { value: { ...config, engine: { ...ENGINE_DEFAULTS, ...engine } } };
    },
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
  _skipSubagents = true;
  _preStepTimeoutMs = 2000;
  // why the engine refused the handshake; set: turn-memory is off for this plugin instance
  _refused = undefined;
  // does a pre-step wait for a booting engine? Only with the landing barrier: the last
  // handshake's word, and before the first one the row's own setting (the engine default is off)
  _bootWait = false;
  // agent -> "turn:step" whose agent/request the engine asked to be called from
  _atRequest = new WeakMap();
  // agent -> the input messages of that step (the array the loop appends after agent/request)
  _stepInput = new WeakMap();

  constructor(ctx, config = {}) {
    super(ctx);
    const { engine, ...policy } = Config['~standard'].validate(config).value ?? { engine: ENGINE_DEFAULTS };
    this.settings = engine;
    this._bootWait = policy.turns?.landingBarrier === true && policy.turns?.enabled !== false;
    const { checkpointSource, ...host } = probeHost();
    this.hello = {
      dshVersion: hostVersion(), host, pid: process.pid, checkpointSource,
      // where the engine keeps a finished turn's compression until it lands (a sidecar, never a session event)
      dshHome: process.env.DSH_HOME || join(homedir(), '.dsh'),
      // the whole row config, `engine` included: the engine validates every key (a typo refuses the handshake)
      config: { ...policy, engine: { ...engine, command: [...engine.command] } },
    };
    this.bridge = new Bridge({
      onCall: (method, params, payload, io) => this.host.handle(method, params, payload, io),
      beforeSend: () => this.mirror.flush(),
      onLost: (why) => this._lost(why),
      onTimeout: (method) => this._timedOut(method),
    });
    this.mirror = new Mirror(this.bridge);
    this.workers = new Workers(ctx, this.mirror, (method, params) => this._call(method, params, { timeoutMs: this.settings.hookTimeoutMs }));
    this.host = new HostOps(ctx, this.mirror, this.workers);
    // a memory tool called while the engine boots waits for it (bounded): the call cannot be
    // answered otherwise, and no step waits for a booting engine any more
    this.publicTools = new PublicTools(ctx, async (method, params) => {
      await this._whenStarted();
      return this._call(method, params, { timeoutMs: this.settings.manualTimeoutMs, liveness: this._liveness() });
    });
    this.process = new EngineProcess({
      command: engine.logFile ? [...engine.command, '--log-file', engine.logFile] : engine.command,
      transport: engine.transport,
      restartDelayMs: engine.restartDelayMs,
      logger: ctx.logger,
      onReady: (endpoint, secret) => this._connect(endpoint, secret),
      onExit: () => this.bridge.close('exited'),
    });

    ctx.on('agent/created', ({ agent }) => {
      this.workers.setup(agent); // our own children: isolate them (throws only for a worker we did not start)
      if (!isWorker(agent) && !(this._skipSubagents && agent.session.header?.origin === 'subagent')) {
        this.mirror.track(agent);
        this.publicTools.attach(agent);
      }
    });
    ctx.on('agent/pre-step', async (payload, next) => {
      const { agent, turn, step, signal } = payload;
      // an engine still booting may hold the previous turn's landing: worth a bounded wait only
      // when the engine makes each turn's first request wait for it (else it lands later)
      if (this._bootWait && turn > 1 && step === 1 && this.mirror.entry(agent.session.id)?.agent === agent) await this._whenStarted();
      const tracked = this.mirror.entry(agent.session.id)?.agent === agent;
      if (tracked) this.publicTools.setContexts(agent, {});
      let withhold = [];
      if (this.bridge.ready && tracked && !signal.aborted) {
        try {
          // the engine may land the previous turn's compression here, before this step starts
          const answer = await this._call('turn.preStep', {
            sessionId: agent.session.id, logLength: agent.session.seq, turn, step, agentOptions: routeOf(agent),
          }, { timeoutMs: this._preStepTimeoutMs, signal, liveness: this._liveness() });
          this.publicTools.setContexts(agent, answer?.contexts);
          if (answer?.landAtRequest) this._atRequest.set(agent, `${turn}:${step}`);
          withhold = answer?.withhold ?? [];
        } catch (error) {
          this.ctx.logger.warn(`turn-memory pre-step skipped: ${error.message}`);
        }
      }
      const decision = await next();
      if (!withhold.length || decision?.kind !== 'enter') return this._remember(agent, turn, step, decision);
      // an automatic continuation whose hand-off turn did not land compressed: never take it in.
      // A first step left with host context only (the runtime-context snapshot) takes nothing,
      // so the loop ends the turn before any request
      const kept = decision.messages.filter((message) => !withhold.includes(message.id));
      const empty = step === 1 && kept.every((message) => isSnapshot(this.workers.snapshotSources, message));
      return this._remember(agent, turn, step, { ...decision, messages: empty ? [] : kept });
    });
    // 0.2: the step's step/start is committed, its prompt and user batch are not yet: a landing
    // the pre-step deferred happens here, inside the loop's own step
    ctx.on('agent/request', async (payload, next) => {
      const { agent, turn, step, signal } = payload;
      if (this._atRequest.get(agent) !== `${turn}:${step}`) return next();
      this._atRequest.delete(agent);
      const input = this._stepInput.get(agent);
      this._stepInput.delete(agent);
      if (this.bridge.ready && !signal?.aborted) {
        try {
          const answer = await this._call('turn.request', { sessionId: agent.session.id, logLength: agent.session.seq, turn, step },
            { timeoutMs: this._preStepTimeoutMs, signal, liveness: this._liveness() });
          const withhold = answer?.withhold ?? [];
          if (withhold.length) this._withholdInStep(agent, input, withhold);
        } catch (error) {
          this.ctx.logger.warn(`turn-memory request landing skipped: ${error.message}`);
        }
      }
      return next();
    });
    ctx.on('agent/request-error', async (payload, next) => {
      const { agent, turn, failure, signal } = payload;
      if (failure?.code !== 'CONTEXT_WINDOW_EXCEEDED' || signal?.aborted || !this.bridge.ready
        || this.mirror.entry(agent.session.id)?.agent !== agent) return next();
      try {
        // the engine compacts once per turn and says whether the request is worth replaying
        const answer = await this._call('compact.overflow', {
          sessionId: agent.session.id, logLength: agent.session.seq, turn, agentOptions: routeOf(agent),
        }, { timeoutMs: this.settings.manualTimeoutMs, signal, liveness: this._liveness() });
        if (answer?.retry) return { kind: 'retry' };
      } catch (error) {
        this.ctx.logger.warn(`turn-memory overflow recovery skipped: ${error.message}`);
      }
      return next();
    });
    ctx.on('agent/disposed', ({ agent }) => this.mirror.untrack(agent));
    ctx.on('session/event', (session, event) => {
      this.mirror.onEvent(session, event);
      // what a pre-step answered is for that turn: once it ends, its sections show nothing
      // (the next turn's first context is assembled before that turn's own pre-step)
      if (event.type === 'turn/end') {
        const agent = this.mirror.entry(session.id)?.agent;
        if (agent) this.publicTools.setContexts(agent, {});
      }
    });
    ctx.on('agent/assistant-stream', ({ agent, frame }) => this.mirror.onStreamFrame(agent, frame));
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
      this._skipSubagents = result?.skipSubagents ?? true;
      this.workers.snapshotSources = result?.snapshotSources ?? [];
      this.workers.shadowContexts = result?.workerShadowContexts ?? [];
      this.workers.snapshotFirst = result?.workerSnapshotFirst ?? false;
      this._preStepTimeoutMs = result?.preStepTimeoutMs ?? this.settings.hookTimeoutMs;
      this._bootWait = result?.bootWait ?? false;
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

  /** Keep the input of a step whose request the engine will be called from (0.2). */
  _remember(agent, turn, step, decision) {
    if (decision?.kind === 'enter' && this._atRequest.get(agent) === `${turn}:${step}`) {
      this._stepInput.set(agent, decision.messages);
    }
    return decision;
  }

  /**
   * The landing this step's request was to carry was refused: never take in the automatic
   * continuation that needed it. The loop appends the step's input after agent/request, from
   * the array the pre-step answered: drop those messages from it; with nothing but host context
   * left (or the input unknown), cancel the step so no request runs on the raw turn (the turn
   * ends aborted; queued input stays queued).
   */
  _withholdInStep(agent, input, withhold) {
    if (Array.isArray(input)) {
      for (let i = input.length - 1; i >= 0; i -= 1) if (withhold.includes(input[i]?.id)) input.splice(i, 1);
      if (!input.every((message) => isSnapshot(this.workers.snapshotSources, message))) return;
    }
    // an AgentCancelCause of kind 'hook' (0.2's loop records it as the turn's end reason)
    agent.cancel({ kind: 'hook', reason: 'turn-memory: the automatic continuation is withheld (its hand-off turn did not land compressed)' },
      { keepInbox: true });
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

  async _call(method, params, opts) {
    const answer = await this.bridge.call(method, params, opts);
    this._timeouts = 0;
    return answer.result;
  }

  /** Long calls ping the engine every 5 s; 10 s without an answer means it hung. */
  _liveness() {
    return { everyMs: 5000, withinMs: Math.max(this.settings.hookTimeoutMs, 10000) };
  }

  /** Pressure/overflow policy lives in the engine; unavailable engine = no compaction. */
  async compactIfNeeded(agent, trigger, signal) {
    if (!this.bridge.ready || signal?.aborted) return null;
    try {
      return await this._call('compact.ifNeeded', {
        sessionId: agent.session.id, logLength: agent.session.seq, trigger, agentOptions: routeOf(agent),
      }, { timeoutMs: this.settings.manualTimeoutMs, signal, liveness: this._liveness() }); // may run a whole compaction
    } catch (error) {
      this.ctx.logger.warn(`turn-memory compactIfNeeded skipped: ${error.message}`);
      return null;
    }
  }

  async compactRegion(start, end, agent, signal) {
    return this._call('compact.region', {
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
  async _whenStarted() {
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
    await this._whenStarted();
    if (this._refused) {
      throw new ManualCompactionError('busy', `turn-memory is off: the engine refused its config (${this._refused}); the conversation is unchanged`);
    }
    if (!this.bridge.ready) {
      throw new ManualCompactionError('busy', 'the turn-memory engine is unavailable (it is starting or restarting); the conversation is unchanged');
    }
    if (!this.mirror.entry(sessionId)) this.mirror.track(agent);
    this.host.maintenance.set(sessionId, signal);
    try {
      const result = await this._call('compact.now', {
        sessionId, logLength: agent.session.seq, sourceCommandId, agentOptions: routeOf(agent),
      }, { timeoutMs: this.settings.manualTimeoutMs, signal, liveness: this._liveness() });
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

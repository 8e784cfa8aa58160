// Runs the engine's compression workers: one-shot fork or spawn children of a session's
// agent, each isolated (its own complete system prompt, no runtime context, no inherited
// tools) with the engine's tools registered in its scope only, so no other agent ever
// sees them (docs/decisions.md#workers-are-isolated). Tool calls go to the engine; the engine decides.
// Facts behind every call here: docs/rc8-workers.md. On 0.2.1 the loop projects the runtime
// context again inside the step (dsh-agent-loop step()), keeps `required` sections (the working
// directory) under a suppressor, and a fork's seed retains the parent's snapshot, so the child
// would get a fresh snapshot after its task: the handshake names what to shadow and where the
// projected snapshot must go (before the task: the fork's "none" retraction, nothing else).
import { randomUUID } from 'node:crypto';

import { engineTool } from './engine-tools.js';

const MARKER = 'turnMemoryWorker';
const CATALOG = 'subagent/catalog';

/** parent session -> the ids of our workers whose catalog fact it holds back */
const hiddenChildren = new WeakMap();

/**
 * 0.2: keep one worker out of its parent's subagent catalog. A local child always records
 * a `subagent/catalog` fact (mode "continuable") in its parent's session when its task is
 * accepted (dsh-subagent SubagentManager.startLocal -> establishCatalogChild), and the person's
 * header lists every entry of that catalog as a conversation they can open and type into
 * (dsh-client-ui-subagent CatalogDropdown). The host offers no hidden or internal child, and
 * only an external provider (no prepareContinuable) skips that fact. So the worker starts under
 * an id reserved here, and the parent session's `append` passes every event through except
 * that one fact about a reserved id (the wrapper stays on the session; it filters nothing once
 * the id is released). The worker itself runs as before. Returns the release; a session whose
 * `append` cannot be wrapped keeps listing the worker (nothing else changes).
 */
export function hideFromCatalog(session, childId) {
  let ids = hiddenChildren.get(session);
  if (ids === undefined) {
    const append = session?.append;
    if (typeof append !== 'function') return () => {};
    ids = new Set();
    const held = ids;
    try {
      Object.defineProperty(session, 'append', {
        configurable: true,
        writable: true,
        value: function append_(type, data, ...rest) {
          if (type === CATALOG && held.has(data?.childId)) return undefined;
          return append.call(this, type, data, ...rest);
        },
      });
    } catch {
      return () => {};
    }
    hiddenChildren.set(session, ids);
  }
  ids.add(childId);
  return () => ids.delete(childId);
}

export function isWorker(agent) {
  return agent.options?.[MARKER] !== undefined;
}

/** The host's runtime-context snapshot, by the {field: value} sources the handshake named. */
export function isSnapshot(sources, message) {
  const source = message?.source;
  return source != null && sources.some((match) => Object.entries(match).every(([k, v]) => source[k] === v));
}

export class Workers {
  /** workerId -> { spec, finished } */
  runs = new Map();

  /** {field: value} pairs naming the host's runtime-context snapshot source (from the handshake) */
  snapshotSources = [];

  /** runtime-context sections the host keeps under a suppressor: shadowed in a worker scope */
  shadowContexts = [];

  /** the host projects its snapshot at the pre-step's snapshot slot: keep it first, never drop it */
  snapshotFirst = false;

  constructor(ctx, mirror, callEngine) {
    this.ctx = ctx;
    this.mirror = mirror;
    this.callEngine = callEngine;
  }

  #isSnapshot(message) {
    return isSnapshot(this.snapshotSources, message);
  }

  /** agent/created: set up one of our children before its first request (a throw vetoes it). */
  setup(agent) {
    const marker = agent.options?.[MARKER];
    if (marker === undefined) return;
    const run = this.runs.get(marker.workerId);
    if (!run) throw new Error(`turn-memory: unknown worker ${marker.workerId}`);
    const c = agent.ctx;
    c.tools.restrict({ allow: [] });
    c.tools.presentAs('native');
    for (const spec of run.spec.tools) c.tools.register(this.#tool(run, spec));
    c.tools.guard(() => (run.finished ? 'the compression is finished; stop here' : undefined));
    c.systemPrompt.section({ name: 'turn-memory:worker', order: 0, complete: true, text: run.spec.persona });
    c.systemPrompt.suppressRuntimeContext();
    // a required section survives the suppressor; an empty optional one of the same name in
    // this scope shadows it, and the suppressor then drops that
    for (const name of this.shadowContexts) c.systemPrompt.context({ name, order: 0, text: '' });
    c.on('agent/pre-step', async (step, next) => {
      run.requests = step.step;
      if (step.step > run.spec.maxRequests) return { kind: 'reject' };
      const decision = await next();
      if (decision.kind !== 'enter') return decision;
      // a fork re-announces "runtime context: none" after the task: host scaffolding the
      // worker must not see, or (where the host projects it again at this slot) not last
      const snapshots = decision.messages.filter((m) => this.#isSnapshot(m));
      const rest = decision.messages.filter((m) => !this.#isSnapshot(m));
      return { ...decision, messages: this.snapshotFirst ? [...snapshots, ...rest] : rest };
    });
  }

  #tool(run, spec) {
    const { jobId, workerId } = run.spec;
    return engineTool(this.ctx, spec, (args) => this.callEngine('worker.tool', { jobId, workerId, tool: spec.name, args }),
      () => { run.finished = true; });
  }

  /** Engine call `worker.run`: start the child, wait for it to end, always dispose it. */
  async run(spec, io) {
    const parent = this.mirror.entry(spec.sessionId)?.agent;
    const subagents = this.ctx.get('subagents');
    if (!parent) throw Object.assign(new Error(`session ${spec.sessionId} has no live agent`), { code: 'unknown-session' });
    if (!subagents) throw Object.assign(new Error('no subagent service in this profile'), { code: 'no-subagents' });
    const record = { spec, finished: false, requests: 0 };
    this.runs.set(spec.workerId, record);
    const abort = new AbortController();
    const cancel = () => abort.abort(new Error('cancelled by the turn-memory engine'));
    io.signal.addEventListener('abort', cancel, { once: true });
    // name the parent's route explicitly: the child otherwise inherits only agent.options
    const route = parent.session.requestHeader?.()?.config ?? parent.options ?? {};
    const request = {
      parent,
      prompt: [{ type: 'text', text: spec.prompt }],
      agentOptions: {
        [MARKER]: { jobId: spec.jobId, workerId: spec.workerId },
        ...(route.provider && route.model ? { provider: route.provider, model: route.model } : {}),
      },
    };
    let run;
    let release = () => {};
    try {
      // how long the host took to start the child: a fork (`turns.workerStart=fork`) copies the
      // parent's whole log on this thread first, and the engine stops forking once that would stall the agent
      const began = performance.now();
      if (typeof subagents.startActivation === 'function') {
        // 0.2: a one-shot child whose result comes back to us, not into the parent's inbox,
        // under an id reserved here so that it stays out of the person's subagent list
        const childId = randomUUID();
        release = hideFromCatalog(parent.session, childId);
        run = await subagents.startActivation({
          provider: spec.mode, label: spec.label, delivery: 'caller', signal: abort.signal, request, childId,
        });
      } else {
        // rc8: persona shadows a preset persona; the complete section wins anyway
        run = await subagents.start(spec.mode, { ...request, label: spec.label, signal: abort.signal, persona: spec.persona });
      }
      const startMs = Math.round(performance.now() - began);
      const result = await run.result;
      return { result: { stop: result.stopReason, requests: record.requests, child: run.id ?? run.childId, startMs } };
    } finally {
      io.signal.removeEventListener('abort', cancel);
      this.runs.delete(spec.workerId);
      try {
        await run?.dispose();
      } finally {
        release();
      }
    }
  }
}

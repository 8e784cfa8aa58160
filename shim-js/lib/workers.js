// Runs the engine's compression workers: one-shot fork or spawn children of a session's
// agent, each isolated (its own complete system prompt, no runtime context, no inherited
// tools) with the engine's tools registered in its scope only, so no other agent ever
// sees them (design D-009, D-018). Tool calls go to the engine; the engine decides.
// Facts behind every call here: docs/rc8-workers.md.
import { engineTool } from './engine-tools.js';

const MARKER = 'turnMemoryWorker';

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
    c.on('agent/pre-step', async (step, next) => {
      run.requests = step.step;
      if (step.step > run.spec.maxRequests) return { kind: 'reject' };
      const decision = await next();
      if (decision.kind !== 'enter') return decision;
      // a fork re-announces "runtime context: none": host scaffolding the worker must not see
      return { ...decision, messages: decision.messages.filter((m) => !this.#isSnapshot(m)) };
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
    try {
      run = typeof subagents.startActivation === 'function'
        // 0.2: a one-shot child whose result comes back to us, not into the parent's inbox
        ? await subagents.startActivation({
          provider: spec.mode, label: spec.label, delivery: 'caller', signal: abort.signal, request,
        })
        // rc8: persona shadows a preset persona; the complete section wins anyway
        : await subagents.start(spec.mode, { ...request, label: spec.label, signal: abort.signal, persona: spec.persona });
      const result = await run.result;
      return { result: { stop: result.stopReason, requests: record.requests, child: run.id ?? run.childId } };
    } finally {
      io.signal.removeEventListener('abort', cancel);
      this.runs.delete(spec.workerId);
      await run?.dispose();
    }
  }
}

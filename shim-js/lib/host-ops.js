// Executes what the engine asks of the host. No policy lives here: the engine has already
// planned and validated every event in the host's own dialect; the shim only checks the
// precondition and appends, synchronously, with no await between the check and the last
// append, so no other writer can interleave.

const SURFACE_TYPES = new Set(['system/message', 'developer/message', 'user/message', 'assistant/message', 'tool/result']);

export class HostOps {
  /** sessionId -> AbortSignal of the manual compaction running on it */
  maintenance = new Map();

  constructor(ctx, mirror, workers) {
    this.ctx = ctx;
    this.mirror = mirror;
    this.workers = workers;
  }

  handle(method, params, payload, io) {
    switch (method) {
      case 'session.apply': return this.apply(params, payload);
      case 'llm.stream': return this.llm(params, io);
      case 'session.flush': return this.flush(params);
      case 'session.resync': return this.resync(params);
      case 'worker.run': return this.workers.run(params, io);
      case 'session.measure': return this.measure(params);
      case 'agent.followup': return this.followup(params);
      default: throw Object.assign(new Error(`unknown host operation ${method}`), { code: 'unknown-method' });
    }
  }

  #session(sessionId) {
    const entry = this.mirror.entry(sessionId);
    if (!entry) throw Object.assign(new Error(`session ${sessionId} is not open in this process`), { code: 'unknown-session' });
    return entry.session;
  }

  apply({ sessionId, expect }, payload) {
    const entry = this.mirror.entry(sessionId);
    if (!entry) return { result: { ok: false, reason: 'unknown-session' } };
    const session = entry.session;
    const events = JSON.parse(payload.toString());
    if (session.seq !== expect.logLength) return { result: { ok: false, reason: 'log-moved', logLength: session.seq } };
    const nodes = session.surface.nodes;
    for (const span of expect.spans ?? []) {
      const at = nodes.indexOf(span[0]);
      if (at < 0 || span.some((seq, i) => nodes[at + i] !== seq)) {
        return { result: { ok: false, reason: 'span-moved', logLength: session.seq, detail: `span ${span[0]}..${span.at(-1)}` } };
      }
    }
    const seqs = [];
    try {
      for (const e of events) {
        const appended = SURFACE_TYPES.has(e.type)
          ? session.append(e.type, e.data, { surfaceOp: e.surfaceOp, ...(e.sourceEventSeqs ? { sourceEventSeqs: e.sourceEventSeqs } : {}) })
          : session.append(e.type, e.data);
        seqs.push(appended.seq);
      }
    } catch (error) {
      return { result: { ok: false, reason: 'append-threw', detail: String(error?.message ?? error), appended: seqs.length, seqs } };
    }
    return { result: { ok: true, seqs } };
  }

  async llm({ sessionId, request, withToolHistory }, io) {
    const session = this.#session(sessionId);
    const owner = this.maintenance.get(sessionId);
    const signal = owner ? AbortSignal.any([io.signal, owner]) : io.signal;
    const options = {
      ...request,
      ...(withToolHistory && session.toolHistory ? { toolHistory: session.toolHistory() } : {}),
      sessionId,
      signal,
    };
    let batch = [];
    let timer;
    const send = () => {
      clearTimeout(timer);
      timer = undefined;
      if (batch.length) io.stream({ chunks: batch });
      batch = [];
    };
    for await (const chunk of this.ctx.llm.stream(options)) {
      batch.push(chunk);
      if (batch.length >= 64) send();
      else timer ??= setTimeout(send, 20);
    }
    send();
    return { result: {} };
  }

  measure({ sessionId }) {
    try {
      const m = this.ctx.get('tokenMeter')?.measure(this.#session(sessionId));
      if (!m) return { result: { error: 'no token meter in this profile' } };
      return { result: { totalTokens: m.totalTokens, nodes: m.nodes.map(({ seq, tokens }) => ({ seq, tokens })) } };
    } catch (error) {
      return { result: { error: String(error?.message ?? error) } };
    }
  }

  /** An ordinary follow-up turn, named by the engine so it can find it in the log later. */
  followup({ sessionId, id, content, source }) {
    const agent = this.mirror.entry(sessionId)?.agent;
    if (!agent) throw Object.assign(new Error(`session ${sessionId} has no live agent`), { code: 'unknown-session' });
    agent.followup(deepFreeze({ id, role: 'user', content, source }));
    return { result: {} };
  }

  async flush({ sessionId }) {
    await this.ctx.sessions.flush(this.#session(sessionId));
    return { result: {} };
  }

  resync({ sessionId }) {
    this.mirror.reset(sessionId);
    return { result: {} };
  }
}

function deepFreeze(value) {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

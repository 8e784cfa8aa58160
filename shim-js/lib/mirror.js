// Forwards committed session events to the engine without ever blocking the agent:
// `session/event` only pushes onto an in-memory batch (listeners must never append or
// await), and batches go out on the next macrotask, in log order, one frame per session.
// A reset (agent/created, reconnect, engine request) resends the whole log.

export class Mirror {
  /** sessionId -> { agent, session } */
  tracked = new Map();
  #queue = new Map();
  #scheduled = false;
  #elide = new Set();
  #except = [];
  /** attemptId -> {turn, step} of live 0.2 assistant streams */
  #attempts = new Map();

  constructor(bridge) {
    this.bridge = bridge;
  }

  set elide(types) {
    this.#elide = new Set(types);
  }

  /** [{type, path, equals}]: events of an elided type the engine still reads whole. */
  set elideExcept(rules) {
    this.#except = rules;
  }

  entry(sessionId) {
    return this.tracked.get(sessionId);
  }

  track(agent) {
    const session = agent.session;
    // where this process started watching the session: turns ending after it were seen live
    const liveFrom = this.tracked.get(session.id)?.liveFrom ?? session.seq;
    this.tracked.set(session.id, { agent, session, liveFrom });
    this.reset(session.id);
  }

  untrack(agent) {
    const id = agent.session?.id;
    if (id === undefined || this.tracked.get(id)?.agent !== agent) return;
    this.tracked.delete(id);
    this.#queue.delete(id);
    this.bridge.notify('session.closed', { sessionId: id });
  }

  reset(sessionId) {
    const entry = this.tracked.get(sessionId);
    if (!entry) return;
    const events = entry.session.snapshotEvents?.() ?? entry.session.events;
    this.#queue.set(sessionId, { reset: true, start: 0, events: [...events], meta: { ...meta(entry.session), liveFrom: entry.liveFrom } });
    this.#schedule();
  }

  resetAll() {
    for (const id of this.tracked.keys()) this.reset(id);
  }

  onEvent(session, event) {
    if (!this.tracked.has(session.id)) return;
    let batch = this.#queue.get(session.id);
    if (!batch) this.#queue.set(session.id, (batch = { reset: false, start: event.seq, events: [] }));
    batch.events.push(event);
    this.#schedule();
  }

  /**
   * 0.2.x publishes live model output as `agent/assistant-stream` frames (never persisted).
   * A chunk frame an exception rule matches goes to the engine as `agent.stream`, read as
   * the `assistant/chunk` data {turn, step, chunk} rc8 would have persisted.
   */
  onStreamFrame(agent, frame) {
    const sessionId = agent?.session?.id;
    if (sessionId === undefined || this.tracked.get(sessionId)?.agent !== agent || !this.bridge.ready) return;
    if (frame.type === 'start') this.#attempts.set(frame.attemptId, { turn: frame.turn, step: frame.step });
    else if (frame.type === 'end') this.#attempts.delete(frame.attemptId);
    else if (frame.type === 'chunk') {
      const at = this.#attempts.get(frame.attemptId);
      const data = at && { turn: at.turn, step: at.step, chunk: frame.chunk };
      if (data && this.#except.some((rule) => rule.type === 'assistant/chunk' && valueAt(data, rule.path) === rule.equals)) {
        this.flush(); // after the events before it, in order
        this.bridge.notify('agent.stream', { sessionId, ...data });
      }
    }
  }

  #schedule() {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Send everything queued. Also called before every bridge call and reply. */
  flush() {
    this.#scheduled = false;
    if (this.#queue.size === 0) return;
    const queue = this.#queue;
    this.#queue = new Map();
    // Not connected: drop; the next handshake resets every tracked session anyway.
    if (!this.bridge.ready) return;
    for (const [sessionId, batch] of queue) {
      const events = this.#elide.size === 0 ? batch.events : batch.events.map((e) => this.#slim(e));
      this.bridge.notify(
        'session.events',
        { sessionId, start: batch.start, count: events.length, reset: batch.reset, ...(batch.meta ? { meta: batch.meta } : {}) },
        Buffer.from(JSON.stringify(events)),
      );
    }
  }

  // The engine says which event types it never reads (live chunks): send their envelope only,
  // unless one of its exception rules matches (one field compared, so the mirror stays cheap).
  #slim(event) {
    if (!this.#elide.has(event.type)) return event;
    if (this.#except.some((rule) => rule.type === event.type && valueAt(event.data, rule.path) === rule.equals)) return event;
    return { type: event.type, seq: event.seq, time: event.time, data: null };
  }
}

function valueAt(value, path) {
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = value[key];
  }
  return value;
}

function meta(session) {
  const h = session.header ?? {};
  return {
    ...(h.parentSession !== undefined ? { parentSession: h.parentSession } : {}),
    ...(h.origin !== undefined ? { origin: h.origin } : {}),
    ...(h.delegationDepth !== undefined ? { delegationDepth: h.delegationDepth } : {}),
  };
}

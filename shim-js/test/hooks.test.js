// The DSH hooks (lib/hooks.js) on a stand-in for the plugin: each carries out what the engine
// answered, and an engine that is down or failing leaves the step as DSH would run it alone.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { agentCreated, preStep, registerHooks, request, requestError, sessionEvent } from '../lib/hooks.js';

const SNAPSHOT = { id: 'ctx', role: 'user', source: { kind: 'runtime-context' }, content: [] };
const FOLLOWUP = { id: 'follow-1', role: 'user', source: { kind: 'plugin:turn-memory', continuation: 'call-1' }, content: [] };
const HUMAN = { id: 'h1', role: 'user', source: { kind: 'user' }, content: [] };

/** A plugin whose engine answers each call with `answers[method]` (a function: it throws). */
function plugin({ ready = true, answers = {}, bootWait = false } = {}) {
  const agent = { session: { id: 's1', seq: 12, header: {} }, options: { provider: 'p', model: 'm' }, cancelled: [] };
  agent.cancel = (cause, opts) => agent.cancelled.push([cause, opts]);
  const seen = { calls: [], warnings: [], contexts: [], tracked: [], attached: [], carried: [], events: [], started: 0 };
  const tm = {
    ctx: { logger: { warn: (line) => seen.warnings.push(line) } },
    bridge: { ready },
    mirror: {
      entry: (id) => (id === 's1' ? { agent } : undefined),
      track: (a) => seen.tracked.push(a),
      onEvent: (session, event) => seen.events.push(event.type),
    },
    workers: { snapshotSources: [{ kind: 'runtime-context' }], setup() {} },
    publicTools: {
      setContexts: (a, contexts) => seen.contexts.push(contexts),
      attach: (a) => seen.attached.push(a),
      carry: (a, tools) => seen.carried.push(tools),
    },
    handshake: { skipSubagents: true, preStepTimeoutMs: 2000, bootWait },
    settings: { manualTimeoutMs: 600000 },
    atRequest: new WeakMap(),
    stepInput: new WeakMap(),
    async callEngine(method, params, opts) {
      seen.calls.push({ method, params, timeoutMs: opts.timeoutMs });
      const answer = answers[method];
      if (typeof answer === 'function') answer();
      return answer;
    },
    liveness: () => ({ everyMs: 5000, withinMs: 10000 }),
    async whenStarted() { seen.started += 1; },
  };
  return { tm, agent, seen };
}

const enter = (messages) => async () => ({ kind: 'enter', messages });
const signal = new AbortController().signal;

describe('hooks', () => {
  test('registerHooks wires one named handler per DSH hook', () => {
    const names = [];
    registerHooks({ on: (name) => names.push(name) }, plugin().tm);
    assert.deepEqual(names, ['agent/created', 'agent/pre-step', 'agent/request', 'agent/request-error', 'agent/disposed',
      'session/event', 'agent/assistant-stream']);
  });

  test('a user agent is mirrored and gets the memory tools; a subagent and a worker do not', () => {
    const { tm, seen } = plugin();
    const user = { session: { header: {} }, options: {} };
    const sub = { session: { header: { origin: 'subagent' } }, options: {} };
    const worker = { session: { header: { origin: 'subagent' } }, options: { turnMemoryWorker: { workerId: 'w' } } };
    for (const agent of [user, sub, worker]) agentCreated(tm, agent);
    assert.deepEqual([seen.tracked, seen.attached], [[user], [user]]);
    tm.handshake.skipSubagents = false; // the engine asked to see subagents too
    agentCreated(tm, sub);
    assert.deepEqual(seen.tracked, [user, sub]);
  });

  test('pre-step: the engine is asked, its sections shown, and the step enters as the host proposed', async () => {
    const { tm, agent, seen } = plugin({ answers: { 'turn.preStep': {
      contexts: { 'turn-memory:continuation': 'x' }, tools: ['read_session_history'] } } });
    const decision = await preStep(tm, { agent, turn: 3, step: 1, signal }, enter([SNAPSHOT, HUMAN]));
    assert.deepEqual(seen.carried, [['read_session_history']]); // the tools the engine named, for this step on
    assert.deepEqual(decision.messages.map((m) => m.id), ['ctx', 'h1']);
    assert.deepEqual(seen.calls, [{ method: 'turn.preStep', timeoutMs: 2000, params: {
      sessionId: 's1', logLength: 12, turn: 3, step: 1, agentOptions: { provider: 'p', model: 'm' } } }]);
    assert.deepEqual(seen.contexts, [{}, { 'turn-memory:continuation': 'x' }]); // cleared first, then the answer
    assert.equal(seen.started, 0); // no landing barrier: no wait for a booting engine
  });

  test('pre-step fails open: an engine error or a missing engine leaves the host decision as it was', async () => {
    const broken = plugin({ answers: { 'turn.preStep': () => { throw new Error('timed out'); } } });
    const decision = await preStep(broken.tm, { agent: broken.agent, turn: 2, step: 1, signal }, enter([HUMAN]));
    assert.deepEqual(decision, { kind: 'enter', messages: [HUMAN] });
    assert.deepEqual(broken.seen.warnings, ['turn-memory pre-step skipped: timed out']);
    const down = plugin({ ready: false });
    assert.deepEqual(await preStep(down.tm, { agent: down.agent, turn: 2, step: 1, signal }, enter([HUMAN])),
      { kind: 'enter', messages: [HUMAN] });
    assert.deepEqual(down.seen.calls, []);
  });

  test('pre-step withholds what the engine names; a first step left with host context only takes nothing', async () => {
    const answers = { 'turn.preStep': { withhold: ['follow-1'] } };
    const first = plugin({ answers });
    const decision = await preStep(first.tm, { agent: first.agent, turn: 4, step: 1, signal }, enter([SNAPSHOT, FOLLOWUP]));
    assert.deepEqual(decision.messages, []);
    const later = plugin({ answers });
    const kept = await preStep(later.tm, { agent: later.agent, turn: 4, step: 2, signal }, enter([SNAPSHOT, FOLLOWUP, HUMAN]));
    assert.deepEqual(kept.messages.map((m) => m.id), ['ctx', 'h1']);
  });

  test('a landing deferred to the request: the request hook calls the engine once, for that step only', async () => {
    const { tm, agent, seen } = plugin({ answers: { 'turn.preStep': { landAtRequest: true },
      'turn.request': { tools: ['read_session_history', 'read_memory_image'] } } });
    await preStep(tm, { agent, turn: 5, step: 1, signal }, enter([HUMAN]));
    let nexts = 0;
    const next = async () => { nexts += 1; };
    await request(tm, { agent, turn: 5, step: 2, signal }, next); // another step: not called
    await request(tm, { agent, turn: 5, step: 1, signal }, next);
    await request(tm, { agent, turn: 5, step: 1, signal }, next); // already done
    assert.deepEqual(seen.calls.map((c) => c.method), ['turn.preStep', 'turn.request']);
    assert.equal(nexts, 3);
    // the request's answer names the tools after its landing: the host reads the list after this hook
    assert.deepEqual(seen.carried, [undefined, ['read_session_history', 'read_memory_image']]);
  });

  test('a landing refused at the request drops the follow-up from the step input, or cancels a step left empty', async () => {
    const answers = { 'turn.preStep': { landAtRequest: true }, 'turn.request': { withhold: ['follow-1'] } };
    const mixed = plugin({ answers });
    const input = [SNAPSHOT, FOLLOWUP, HUMAN];
    await preStep(mixed.tm, { agent: mixed.agent, turn: 6, step: 1, signal }, async () => ({ kind: 'enter', messages: input }));
    await request(mixed.tm, { agent: mixed.agent, turn: 6, step: 1, signal }, async () => {});
    assert.deepEqual(input.map((m) => m.id), ['ctx', 'h1']);
    assert.deepEqual(mixed.agent.cancelled, []);

    const alone = plugin({ answers });
    await preStep(alone.tm, { agent: alone.agent, turn: 6, step: 1, signal }, enter([SNAPSHOT, FOLLOWUP]));
    await request(alone.tm, { agent: alone.agent, turn: 6, step: 1, signal }, async () => {});
    assert.equal(alone.agent.cancelled.length, 1);
    assert.equal(alone.agent.cancelled[0][0].kind, 'hook');
    assert.deepEqual(alone.agent.cancelled[0][1], { keepInbox: true });
  });

  test('a context overflow is replayed only when the engine compacted', async () => {
    const overflow = { code: 'CONTEXT_WINDOW_EXCEEDED' };
    const next = async () => 'host';
    const retried = plugin({ answers: { 'compact.overflow': { retry: true } } });
    assert.deepEqual(await requestError(retried.tm, { agent: retried.agent, turn: 2, failure: overflow, signal }, next),
      { kind: 'retry' });
    assert.equal(retried.seen.calls[0].timeoutMs, 600000);
    const declined = plugin({ answers: { 'compact.overflow': { retry: false } } });
    assert.equal(await requestError(declined.tm, { agent: declined.agent, turn: 2, failure: overflow, signal }, next), 'host');
    const other = plugin({ answers: { 'compact.overflow': { retry: true } } });
    assert.equal(await requestError(other.tm, { agent: other.agent, turn: 2, failure: { code: 'RATE_LIMIT' }, signal }, next), 'host');
    assert.deepEqual(other.seen.calls, []);
  });

  test('every session event is mirrored; a turn/end clears what the sections showed', () => {
    const { tm, seen } = plugin();
    sessionEvent(tm, { id: 's1' }, { type: 'assistant/message' });
    sessionEvent(tm, { id: 's1' }, { type: 'turn/end' });
    assert.deepEqual(seen.events, ['assistant/message', 'turn/end']);
    assert.deepEqual(seen.contexts, [{}]);
  });
});

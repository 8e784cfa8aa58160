// Workers.setup: what a compression worker's child scope gets before its first request
// (docs/decisions.md#workers-are-isolated):
// the persona as the one complete section, the runtime context suppressed (and any section the
// host keeps under a suppressor shadowed), and a first step whose task is the last message.
// Workers.run: how a worker is started on each host; on 0.2 under a reserved id whose
// `subagent/catalog` fact never reaches the parent's log (the person's subagent list).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Workers, hideFromCatalog } from '../lib/workers.js';

const SNAPSHOT = { kind: 'runtime-context' };
const TASK = { id: 't', role: 'user', source: { kind: 'user' }, content: [{ type: 'text', text: 'You are now the memory editor…' }] };
const NONE = { id: 'c', role: 'user', source: SNAPSHOT, content: [{ type: 'text', text: 'Current runtime context: none.' }] };

/** A child agent whose scope records what setup registered, and its pre-step hook. */
function child() {
  const calls = { sections: [], contexts: [], suppressed: 0, hooks: {} };
  const ctx = {
    tools: { restrict() {}, presentAs() {}, register() {}, guard() {} },
    systemPrompt: {
      section: (s) => calls.sections.push(s),
      context: (c) => calls.contexts.push(c),
      suppressRuntimeContext: () => { calls.suppressed += 1; },
    },
    on: (name, fn) => { calls.hooks[name] = fn; },
  };
  return { agent: { options: { turnMemoryWorker: { workerId: 'w1' } }, ctx }, calls };
}

function workers({ shadow = [], first = false } = {}) {
  const w = new Workers({}, {}, async () => ({}));
  w.snapshotSources = [SNAPSHOT];
  w.shadowContexts = shadow;
  w.snapshotFirst = first;
  w.runs.set('w1', { spec: { tools: [], persona: 'PERSONA', maxRequests: 3 }, finished: false });
  return w;
}

/** The messages the child's first step takes in, given what the host's own pre-step proposed. */
async function firstStep(w, calls, proposed) {
  const decision = await calls.hooks['agent/pre-step']({ step: 1 }, async () => ({ kind: 'enter', messages: proposed }));
  return decision.messages.map((m) => m.id);
}

describe('Workers.setup', () => {
  test('the persona is the one complete section and runtime context is suppressed', () => {
    const { agent, calls } = child();
    workers().setup(agent);
    assert.deepEqual(calls.sections, [{ name: 'turn-memory:worker', order: 0, complete: true, text: 'PERSONA' }]);
    assert.equal(calls.suppressed, 1);
    assert.deepEqual(calls.contexts, []);
  });

  test('a section the host keeps under a suppressor is shadowed by an empty optional one', () => {
    const { agent, calls } = child();
    workers({ shadow: ['working-directory:current'] }).setup(agent);
    assert.deepEqual(calls.contexts, [{ name: 'working-directory:current', order: 0, text: '' }]);
  });

  test('rc8: the host snapshot the fork re-announces after the task is dropped', async () => {
    const { agent, calls } = child();
    const w = workers();
    w.setup(agent);
    assert.deepEqual(await firstStep(w, calls, [TASK, NONE]), ['t']);
  });

  test('0.2.1: the snapshot slot goes ahead of the task, so the task stays last', async () => {
    const { agent, calls } = child();
    const w = workers({ first: true });
    w.setup(agent);
    assert.deepEqual(await firstStep(w, calls, [TASK, NONE]), ['c', 't']);
    assert.deepEqual(await firstStep(w, calls, [TASK]), ['t']);
  });

  test('a step past the worker request budget is rejected', async () => {
    const { agent, calls } = child();
    workers().setup(agent);
    const decision = await calls.hooks['agent/pre-step']({ step: 4 }, async () => ({ kind: 'enter', messages: [] }));
    assert.deepEqual(decision, { kind: 'reject' });
  });
});

/** A parent session like DSH's: `append` is a prototype method that logs the event. */
class FakeSession {
  log = [];
  append(type, data) {
    const event = { type, seq: this.log.length, data };
    this.log.push(event);
    return event;
  }
}

const io = () => ({ signal: new AbortController().signal });

function runner(subagents) {
  const session = new FakeSession();
  const parent = { session, options: { provider: 'p', model: 'm' } };
  const w = new Workers({ get: (name) => (name === 'subagents' ? subagents : undefined) },
    { entry: () => ({ agent: parent }) }, async () => ({}));
  return { w, session };
}

const SPEC = { sessionId: 's', jobId: 'j', workerId: 'w9', mode: 'fork', label: 'turn-memory turn 3', prompt: 'TASK', persona: 'P', tools: [] };

describe('Workers.run', () => {
  test('0.2: the worker starts under a reserved id and its catalog fact never reaches the parent', async () => {
    const seen = [];
    const subagents = {
      async startActivation(spec) {
        seen.push(spec);
        const { session } = spec.request.parent;
        session.append('turn/start', { turn: 4 });
        // dsh-subagent establishCatalogChild, at the child's acceptance
        session.append('subagent/catalog', { version: 0, childId: spec.childId, childCreatedAt: 1, mode: 'continuable', label: spec.label });
        session.append('subagent/catalog', { version: 0, childId: 'someone-elses', childCreatedAt: 1, mode: 'continuable', label: 'x' });
        return { childId: spec.childId, result: Promise.resolve({ stopReason: 'completed', output: [] }), dispose: async () => {} };
      },
    };
    const { w, session } = runner(subagents);
    const { result } = await w.run(SPEC, io());
    assert.equal(seen.length, 1);
    assert.match(seen[0].childId, /^[0-9a-f-]{36}$/);
    assert.equal(seen[0].delivery, 'caller');
    assert.deepEqual({ ...result, startMs: 0 }, { stop: 'completed', requests: 0, child: seen[0].childId, startMs: 0 });
    assert.deepEqual(session.log.map((e) => [e.type, e.data.childId]),
      [['turn/start', undefined], ['subagent/catalog', 'someone-elses']]);
    // released: a later fact about that id (none is expected) would pass, and seq stays dense
    session.append('subagent/catalog', { childId: seen[0].childId });
    assert.deepEqual(session.log.map((e) => e.seq), [0, 1, 2]);
  });

  test('0.2: the catalog fact of a worker that fails to start is held back too, and released', async () => {
    let reserved;
    const subagents = {
      async startActivation(spec) {
        reserved = spec.childId;
        spec.request.parent.session.append('subagent/catalog', { childId: spec.childId });
        throw new Error('no provider');
      },
    };
    const { w, session } = runner(subagents);
    await assert.rejects(w.run(SPEC, io()), /no provider/);
    assert.deepEqual(session.log, []);
    session.append('subagent/catalog', { childId: reserved });
    assert.equal(session.log.length, 1);
  });

  test('the time the host held the thread to start the child comes back as startMs', async () => {
    const subagents = {
      async startActivation(spec) {
        const until = performance.now() + 40; // a fork copying a long log, synchronously
        while (performance.now() < until);
        return { childId: spec.childId, result: new Promise((r) => setTimeout(() => r({ stopReason: 'completed' }), 60)),
          dispose: async () => {} };
      },
    };
    const { w } = runner(subagents);
    const { result } = await w.run(SPEC, io());
    // the start only: not the 60 ms the child then ran
    assert.ok(result.startMs >= 40 && result.startMs < 60, `startMs ${result.startMs}`);
  });

  test('rc8: subagents.start as before, no reserved id, the session untouched', async () => {
    const calls = [];
    const subagents = {
      async start(mode, request) {
        calls.push([mode, request]);
        return { id: 'c1', result: Promise.resolve({ stopReason: 'completed' }), dispose: async () => {} };
      },
    };
    const { w, session } = runner(subagents);
    const { result } = await w.run(SPEC, io());
    assert.deepEqual({ ...result, startMs: 0 }, { stop: 'completed', requests: 0, child: 'c1', startMs: 0 });
    assert.equal(calls[0][0], 'fork');
    assert.equal(calls[0][1].childId, undefined);
    assert.equal(Object.hasOwn(session, 'append'), false);
  });

  test('hideFromCatalog wraps a session once and passes every other event through', () => {
    const session = new FakeSession();
    const releaseA = hideFromCatalog(session, 'a');
    const wrapped = session.append;
    const releaseB = hideFromCatalog(session, 'b');
    assert.equal(session.append, wrapped);
    assert.equal(session.append('subagent/catalog', { childId: 'a' }), undefined);
    assert.equal(session.append('subagent/catalog', { childId: 'b' }), undefined);
    assert.equal(session.append('user/message', { childId: 'a' }).seq, 0);
    releaseA();
    assert.equal(session.append('subagent/catalog', { childId: 'a' }).seq, 1);
    assert.equal(session.append('subagent/catalog', { childId: 'b' }), undefined);
    releaseB();
    assert.equal(session.log.length, 2);
  });

  test('a session whose append cannot be wrapped keeps listing the worker', () => {
    const session = Object.freeze(new FakeSession());
    const release = hideFromCatalog(session, 'a');
    release();
    assert.equal(session.append('subagent/catalog', { childId: 'a' }).seq, 0);
  });
});

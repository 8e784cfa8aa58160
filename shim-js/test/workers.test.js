// Workers.setup: what a compression worker's child scope gets before its first request
// (docs/decisions.md#workers-are-isolated):
// the persona as the one complete section, the runtime context suppressed (and any section the
// host keeps under a suppressor shadowed), and a first step whose task is the last message.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Workers } from '../lib/workers.js';

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

// HostOps.apply: the shim's last guard before anything is appended to a session. The engine
// has planned and validated every event; the shim checks the precondition (log length, the
// spans the plan replaces) and appends, synchronously, with no await in between.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { HostOps } from '../lib/host-ops.js';

/** A session as HostOps sees it: `seq` is the log length, `surface.nodes` the surface seqs. */
function fakeSession({ seq = 8, nodes = [0, 2, 3, 4, 6, 7], failAt } = {}) {
  const session = {
    id: 's1',
    seq,
    surface: { nodes },
    /** every append as [type, data, options?] (the arguments exactly as passed) */
    calls: [],
    append(...args) {
      if (session.calls.length === failAt) throw new Error('host refused the event');
      session.calls.push(args);
      return { seq: session.seq++ };
    },
  };
  return session;
}

function hostOps(session) {
  const mirror = { entry: (id) => (id === session.id ? { session, agent: {} } : undefined) };
  return new HostOps({}, mirror, {});
}

const payload = (events) => Buffer.from(JSON.stringify(events));

// what an engine plan looks like: surface events carry their intent, others do not
const PLAN = [
  {
    type: 'user/message',
    data: { id: 'u1', role: 'user', content: [{ type: 'text', text: '[compressed turn 1]' }] },
    surfaceOp: { kind: 'replace', start: 2, end: 4 },
    sourceEventSeqs: [2, 3, 4],
  },
  {
    type: 'assistant/message',
    data: { role: 'assistant', content: [{ type: 'text', text: 'ok' }] },
    surfaceOp: { kind: 'insert', after: 6 },
  },
  { type: 'turn-memory/landed', data: { turn: 1, way: 'rewrite' } },
];

describe('HostOps.apply', () => {
  test('precondition met: every event is appended in order, surfaceOp and sourceEventSeqs exactly as given', () => {
    const session = fakeSession();
    const answer = hostOps(session).apply({ sessionId: 's1', expect: { logLength: 8, spans: [[2, 3, 4], [6, 7]] } }, payload(PLAN));
    assert.deepEqual(answer, { result: { ok: true, seqs: [8, 9, 10] } });
    assert.deepEqual(session.calls, [
      ['user/message', PLAN[0].data, { surfaceOp: PLAN[0].surfaceOp, sourceEventSeqs: [2, 3, 4] }],
      // no sourceEventSeqs in the plan: none in the options either (not even `undefined`)
      ['assistant/message', PLAN[1].data, { surfaceOp: PLAN[1].surfaceOp }],
      // not a surface event: appended with its type and data only
      ['turn-memory/landed', PLAN[2].data],
    ]);
  });

  test('precondition met without spans (an append-only plan)', () => {
    const session = fakeSession();
    const answer = hostOps(session).apply({ sessionId: 's1', expect: { logLength: 8 } }, payload([PLAN[2]]));
    assert.deepEqual(answer, { result: { ok: true, seqs: [8] } });
    assert.equal(session.calls.length, 1);
  });

  test('log moved: nothing is appended; the reason and the current log length come back', () => {
    for (const logLength of [7, 9, 0]) {
      const session = fakeSession({ seq: 8 });
      const answer = hostOps(session).apply({ sessionId: 's1', expect: { logLength, spans: [[2, 3, 4]] } }, payload(PLAN));
      assert.deepEqual(answer, { result: { ok: false, reason: 'log-moved', logLength: 8 } });
      assert.deepEqual(session.calls, []);
      assert.equal(session.seq, 8);
    }
  });

  test('span moved: nothing is appended when a planned span is no longer contiguous on the surface', () => {
    const cases = [
      { nodes: [0, 3, 4, 6, 7], why: 'its first node left the surface' },
      { nodes: [0, 2, 3, 5, 4, 6, 7], why: 'a node was inserted inside it' },
      { nodes: [0, 2, 3, 6, 7], why: 'its last node left the surface' },
      { nodes: [0, 2, 3], spans: [[0], [2, 3, 4]], why: 'it runs past the end of the surface' },
      { nodes: [0, 4, 3, 2, 6, 7], why: 'its nodes are there but out of order' },
    ];
    for (const { nodes, spans = [[6, 7], [2, 3, 4]], why } of cases) {
      const session = fakeSession({ nodes });
      const answer = hostOps(session).apply({ sessionId: 's1', expect: { logLength: 8, spans } }, payload(PLAN));
      assert.deepEqual(answer, { result: { ok: false, reason: 'span-moved', logLength: 8, detail: 'span 2..4' } }, why);
      assert.deepEqual(session.calls, [], why);
    }
  });

  test('an append that throws midway: reason append-threw, how many were appended and their seqs', () => {
    const session = fakeSession({ failAt: 1 });
    const answer = hostOps(session).apply({ sessionId: 's1', expect: { logLength: 8, spans: [[2, 3, 4]] } }, payload(PLAN));
    assert.deepEqual(answer, { result: { ok: false, reason: 'append-threw', detail: 'host refused the event', appended: 1, seqs: [8] } });
    assert.equal(session.calls.length, 1, 'nothing is appended after the throw');
  });

  test('a session this process does not have: unknown-session, nothing appended', () => {
    const session = fakeSession();
    const answer = hostOps(session).apply({ sessionId: 'other', expect: { logLength: 8 } }, payload(PLAN));
    assert.deepEqual(answer, { result: { ok: false, reason: 'unknown-session' } });
    assert.deepEqual(session.calls, []);
  });

  test('synchronous: a plain object, and no task queued before the call runs before the last append', async () => {
    const session = fakeSession();
    const ops = hostOps(session);
    const order = [];
    const append = session.append;
    // every kind of task a yield would let run: each is "another writer" appending to the session
    const other = (name) => () => { order.push(name); append('other/writer', { name }); };
    process.nextTick(other('nextTick'));
    queueMicrotask(other('microtask'));
    Promise.resolve().then(other('promise'));
    setImmediate(other('immediate'));
    setTimeout(other('timeout'), 0);
    session.append = (...args) => { order.push(`apply:${args[0]}`); return append(...args); };

    for (const answer of [
      ops.apply({ sessionId: 's1', expect: { logLength: 8, spans: [[2, 3, 4]] } }, payload(PLAN)),
      // the bridge reaches it through handle(); that path adds no await either
      ops.handle('session.apply', { sessionId: 's1', expect: { logLength: 11 } }, payload([PLAN[2]])),
    ]) {
      assert.equal(typeof answer?.then, 'undefined', 'apply returns a plain object, not a promise');
      assert.equal(answer.result.ok, true);
    }
    assert.deepEqual(order, ['apply:user/message', 'apply:assistant/message', 'apply:turn-memory/landed', 'apply:turn-memory/landed']);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(order.slice(4).sort(), ['immediate', 'microtask', 'nextTick', 'promise', 'timeout']);
    assert.deepEqual(session.calls.slice(0, 4).map(([type]) => type), ['user/message', 'assistant/message', 'turn-memory/landed', 'turn-memory/landed']);
  });

  test('handle() refuses an operation it does not know', () => {
    assert.throws(() => hostOps(fakeSession()).handle('session.nope', {}), { code: 'unknown-method' });
  });
});

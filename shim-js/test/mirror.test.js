// Mirror: committed session events reach the engine in log order, one batch per session per
// macrotask, never blocking the agent; a reset resends the whole log.
import assert from 'node:assert/strict';
import { beforeEach, describe, test } from 'node:test';

import { Mirror } from '../lib/mirror.js';

/** A bridge that records what the mirror sends (events decoded from the payload frame). */
function fakeBridge() {
  return {
    ready: true,
    sent: [],
    notify(method, params, payload) {
      this.sent.push(payload === undefined ? { method, params } : { method, params, events: JSON.parse(payload.toString()) });
    },
  };
}

const ev = (seq, type = 'user/message', data = { text: `event ${seq}` }) => ({ type, seq, time: 1000 + seq, data });

function fakeAgent(id, { events = [], snapshot, header } = {}) {
  const session = { id, seq: events.length, events, ...(header ? { header } : {}) };
  if (snapshot) session.snapshotEvents = () => snapshot;
  return { session };
}

/** one macrotask: the mirror's scheduled flush (a setImmediate queued earlier) has run */
const tick = () => new Promise((resolve) => setImmediate(resolve));

const REASONING_BLOCK_END = { type: 'assistant/chunk', path: ['chunk', 'block', 'type'], equals: 'reasoning' };

describe('Mirror', () => {
  let bridge;
  let mirror;
  beforeEach(() => {
    bridge = fakeBridge();
    mirror = new Mirror(bridge);
  });

  test('track() resets the session with its whole log: snapshotEvents() when the host has it, else events', async () => {
    const a = fakeAgent('a', { events: [ev(0), ev(1)], snapshot: [ev(0), ev(1), ev(2)], header: { origin: 'user', delegationDepth: 0 } });
    const b = fakeAgent('b', { events: [ev(0), ev(1)], header: { parentSession: 'a', origin: 'subagent', delegationDepth: 1, cwd: '/x' } });
    mirror.track(a);
    mirror.track(b);
    assert.deepEqual(bridge.sent, [], 'nothing goes out synchronously');
    await tick();
    assert.deepEqual(bridge.sent, [
      { method: 'session.events', params: { sessionId: 'a', start: 0, count: 3, reset: true, meta: { origin: 'user', delegationDepth: 0, liveFrom: 2 } }, events: [ev(0), ev(1), ev(2)] },
      { method: 'session.events', params: { sessionId: 'b', start: 0, count: 2, reset: true, meta: { parentSession: 'a', origin: 'subagent', delegationDepth: 1, liveFrom: 2 } }, events: [ev(0), ev(1)] },
    ]);
    assert.equal(mirror.entry('a').session, a.session);
  });

  test('a second track() of a session keeps where this process started watching it (liveFrom)', async () => {
    const first = fakeAgent('a', { events: [ev(0)] });
    mirror.track(first);
    const again = fakeAgent('a', { events: [ev(0), ev(1), ev(2)] });
    mirror.track(again);
    await tick();
    assert.equal(bridge.sent.length, 1);
    assert.equal(bridge.sent[0].params.meta.liveFrom, 1);
    assert.equal(bridge.sent[0].params.count, 3);
    assert.equal(mirror.entry('a').agent, again);
  });

  test('events of one tick: one batch per session, in log order, on the next macrotask, never synchronously', async () => {
    const a = fakeAgent('a', { events: [ev(0)] });
    const b = fakeAgent('b', { events: [ev(0), ev(1)] });
    mirror.track(a);
    mirror.track(b);
    await tick();
    bridge.sent = [];
    mirror.onEvent(b.session, ev(2));
    mirror.onEvent(a.session, ev(1));
    mirror.onEvent(b.session, ev(3));
    mirror.onEvent(a.session, ev(2));
    mirror.onEvent(b.session, ev(4));
    await Promise.resolve();
    assert.deepEqual(bridge.sent, [], 'a listener only queues: nothing is sent within the tick');
    await tick();
    assert.deepEqual(bridge.sent, [
      // sessions in the order they first had an event this tick; each batch in log order
      { method: 'session.events', params: { sessionId: 'b', start: 2, count: 3, reset: false }, events: [ev(2), ev(3), ev(4)] },
      { method: 'session.events', params: { sessionId: 'a', start: 1, count: 2, reset: false }, events: [ev(1), ev(2)] },
    ]);
  });

  test('batches of successive ticks go out in order; an untracked session is ignored', async () => {
    const a = fakeAgent('a');
    mirror.track(a);
    await tick();
    bridge.sent = [];
    mirror.onEvent(a.session, ev(0));
    mirror.onEvent({ id: 'stranger' }, ev(7));
    await tick();
    mirror.onEvent(a.session, ev(1));
    mirror.onEvent(a.session, ev(2));
    await tick();
    mirror.onEvent(a.session, ev(3));
    await tick();
    assert.deepEqual(bridge.sent.map((m) => [m.params.sessionId, m.params.start, m.events.map((e) => e.seq)]), [
      ['a', 0, [0]], ['a', 1, [1, 2]], ['a', 3, [3]],
    ]);
  });

  test('flush() sends what is queued at once (the bridge calls it before every call and reply), and only once', async () => {
    const a = fakeAgent('a');
    const b = fakeAgent('b');
    mirror.track(a);
    mirror.track(b);
    mirror.flush();
    assert.equal(bridge.sent.length, 2, 'the resets went out synchronously');
    mirror.onEvent(a.session, ev(0));
    mirror.onEvent(b.session, ev(0));
    mirror.onEvent(a.session, ev(1));
    mirror.flush();
    assert.deepEqual(bridge.sent.slice(2).map((m) => [m.params.sessionId, m.events.map((e) => e.seq)]), [['a', [0, 1]], ['b', [0]]]);
    await tick();
    assert.equal(bridge.sent.length, 4, 'the scheduled flush finds nothing left to send');
    mirror.onEvent(a.session, ev(2));
    await tick();
    assert.deepEqual(bridge.sent.slice(4).map((m) => m.events.map((e) => e.seq)), [[2]], 'and the next event is scheduled again');
  });

  test('events committed after a reset in the same tick go out in the reset batch, after the log', async () => {
    const a = fakeAgent('a', { events: [ev(0), ev(1)] });
    mirror.track(a);
    a.session.events.push(ev(2));
    mirror.onEvent(a.session, ev(2));
    await tick();
    assert.deepEqual(bridge.sent.map((m) => [m.params.start, m.params.count, m.params.reset, m.events.map((e) => e.seq)]), [[0, 3, true, [0, 1, 2]]]);
  });

  test('reset() replaces what was queued for the session with its whole log; resetAll() resets every session', async () => {
    const a = fakeAgent('a', { events: [ev(0), ev(1)] });
    const b = fakeAgent('b', { events: [ev(0)] });
    mirror.track(a);
    mirror.track(b);
    await tick();
    bridge.sent = [];
    a.session.events.push(ev(2));
    mirror.onEvent(a.session, ev(2));
    mirror.reset('a');
    await tick();
    assert.deepEqual(bridge.sent, [
      { method: 'session.events', params: { sessionId: 'a', start: 0, count: 3, reset: true, meta: { liveFrom: 2 } }, events: [ev(0), ev(1), ev(2)] },
    ]);
    bridge.sent = [];
    mirror.reset('unknown');
    mirror.resetAll();
    await tick();
    assert.deepEqual(bridge.sent.map((m) => [m.params.sessionId, m.params.reset, m.params.count]), [['a', true, 3], ['b', true, 1]]);
  });

  test('while the bridge is not ready queued batches are dropped (the next handshake resets every session)', async () => {
    const a = fakeAgent('a', { events: [ev(0)] });
    bridge.ready = false;
    mirror.track(a);
    mirror.onEvent(a.session, ev(1));
    await tick();
    mirror.flush();
    assert.deepEqual(bridge.sent, []);
    bridge.ready = true;
    mirror.onEvent(a.session, ev(2));
    await tick();
    assert.deepEqual(bridge.sent.map((m) => [m.params.start, m.params.reset]), [[2, false]], 'the dropped batches do not come back');
  });

  test('untrack() sends session.closed and drops what was queued; a stale agent of the session is ignored', async () => {
    const a = fakeAgent('a');
    mirror.track(a);
    await tick();
    bridge.sent = [];
    const stale = { session: a.session };
    mirror.untrack(stale);
    mirror.untrack({});
    assert.ok(mirror.entry('a'), 'another agent of the session does not untrack it');
    mirror.onEvent(a.session, ev(0));
    mirror.untrack(a);
    assert.deepEqual(bridge.sent, [{ method: 'session.closed', params: { sessionId: 'a' } }]);
    assert.equal(mirror.entry('a'), undefined);
    await tick();
    mirror.onEvent(a.session, ev(1));
    await tick();
    assert.equal(bridge.sent.length, 1, 'nothing of the session goes out after it closed');
  });

  test('elide: an elided type goes out as its envelope (data null) unless an elideExcept rule matches; resets too', async () => {
    mirror.elide = ['assistant/chunk'];
    mirror.elideExcept = [REASONING_BLOCK_END];
    const text = ev(1, 'assistant/chunk', { turn: 1, step: 1, chunk: { type: 'delta', text: 'hi' } });
    const endOfText = ev(2, 'assistant/chunk', { turn: 1, step: 1, chunk: { type: 'block-end', block: { type: 'text', text: 'hi' } } });
    const endOfThought = ev(3, 'assistant/chunk', { turn: 1, step: 1, chunk: { type: 'block-end', block: { type: 'reasoning', text: 'hmm' } } });
    const notAnObject = ev(4, 'assistant/chunk', 'raw');
    const user = ev(0);
    const a = fakeAgent('a', { events: [user, text] });
    mirror.track(a);
    await tick();
    for (const e of [endOfText, endOfThought, notAnObject]) mirror.onEvent(a.session, e);
    await tick();
    const envelope = (e) => ({ type: e.type, seq: e.seq, time: e.time, data: null });
    assert.deepEqual(bridge.sent.map((m) => m.events), [
      [user, envelope(text)],
      [envelope(endOfText), endOfThought, envelope(notAnObject)],
    ]);
    // the rule compares one field of its own type only
    bridge.sent = [];
    mirror.elide = ['assistant/chunk', 'tool/progress'];
    mirror.elideExcept = [{ type: 'tool/progress', path: ['chunk', 'block', 'type'], equals: 'reasoning' }];
    mirror.onEvent(a.session, endOfThought);
    await tick();
    assert.deepEqual(bridge.sent[0].events, [envelope(endOfThought)]);
  });

  test('onStreamFrame (0.2): a reasoning block-end chunk of a started attempt goes out as agent.stream after the events before it', async () => {
    mirror.elideExcept = [REASONING_BLOCK_END];
    const a = fakeAgent('a', { events: [ev(0)] });
    mirror.track(a);
    await tick();
    bridge.sent = [];
    const blockEnd = { type: 'block-end', block: { type: 'reasoning', text: 'a long thought' } };
    mirror.onEvent(a.session, ev(1, 'step/start'));
    mirror.onStreamFrame(a, { type: 'start', attemptId: 'x1', turn: 2, step: 3 });
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x1', chunk: { type: 'delta', text: 'thinking' } });
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x1', chunk: { type: 'block-end', block: { type: 'text', text: 'no' } } });
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x1', chunk: blockEnd });
    assert.deepEqual(bridge.sent, [
      { method: 'session.events', params: { sessionId: 'a', start: 1, count: 1, reset: false }, events: [ev(1, 'step/start')] },
      { method: 'agent.stream', params: { sessionId: 'a', turn: 2, step: 3, chunk: blockEnd } },
    ], 'at once, right after the events queued before it');
    await tick();
    assert.equal(bridge.sent.length, 2);
  });

  test('onStreamFrame (0.2): nothing goes out for an ended or unknown attempt, a stale agent, no rule, or no engine', () => {
    mirror.elideExcept = [REASONING_BLOCK_END];
    const a = fakeAgent('a');
    mirror.track(a);
    mirror.flush();
    bridge.sent = [];
    const chunk = { type: 'block-end', block: { type: 'reasoning', text: 't' } };
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'never-started', chunk });
    mirror.onStreamFrame(a, { type: 'start', attemptId: 'x1', turn: 1, step: 1 });
    mirror.onStreamFrame(a, { type: 'end', attemptId: 'x1' });
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x1', chunk });
    mirror.onStreamFrame(a, { type: 'start', attemptId: 'x2', turn: 1, step: 2 });
    mirror.onStreamFrame({ session: a.session }, { type: 'chunk', attemptId: 'x2', chunk });
    bridge.ready = false;
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x2', chunk });
    bridge.ready = true;
    mirror.elideExcept = [];
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x2', chunk });
    assert.deepEqual(bridge.sent, []);
    mirror.elideExcept = [REASONING_BLOCK_END];
    mirror.onStreamFrame(a, { type: 'chunk', attemptId: 'x2', chunk });
    assert.deepEqual(bridge.sent, [{ method: 'agent.stream', params: { sessionId: 'a', turn: 1, step: 2, chunk } }]);
  });
});

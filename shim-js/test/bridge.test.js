// Bridge: the shim's DEALER side of the RPC, against a real zeromq ROUTER playing the engine.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Router } from 'zeromq';

import { Bridge, EngineCallError, EngineUnavailableError } from '../lib/bridge.js';

/**
 * The engine's side: a ROUTER that records every message it gets and answers calls whose
 * method has a handler (`handler(msg, payload)` -> {result, payload?} | {error}; a method
 * without one is never answered). Its sends are chained too (a ROUTER is a zeromq socket).
 */
async function fakeEngine(handlers = {}) {
  const router = new Router({ linger: 0, sendHighWaterMark: 100000, receiveHighWaterMark: 100000 });
  await router.bind('tcp://127.0.0.1:*');
  let chain = Promise.resolve();
  const engine = {
    endpoint: router.lastEndpoint,
    /** every message received, in order: the JSON header, plus `payload` (a Buffer) if any */
    received: [],
    handlers: { hello: (msg) => ({ result: { protocol: msg.params.protocol, dialect: 'test' } }), ping: () => ({ result: {} }), ...handlers },
    peer: undefined,
    send(msg, payload) {
      const frames = [engine.peer, JSON.stringify({ v: 1, ...msg }), ...(payload === undefined ? [] : [payload])];
      chain = chain.then(() => router.send(frames));
      return chain;
    },
    of: (kind, method) => engine.received.filter((m) => m.kind === kind && (method === undefined || m.method === method)),
    async until(predicate, what, ms = 5000) {
      const deadline = Date.now() + ms;
      while (!predicate(engine.received)) {
        if (Date.now() > deadline) throw new Error(`the fake engine never got ${what}`);
        await sleep(5);
      }
    },
    close: () => router.close(),
  };
  (async () => {
    for await (const [identity, header, payload] of router) {
      engine.peer = identity;
      const msg = JSON.parse(header.toString());
      engine.received.push(payload === undefined ? msg : { ...msg, payload });
      const handler = msg.kind === 'call' && engine.handlers[msg.method];
      if (!handler) continue;
      Promise.resolve(handler(msg, payload)).then((answer) => {
        if (!answer) return;
        const { payload: out, ...rest } = answer;
        engine.send({ kind: 'reply', id: msg.id, ...rest }, out);
      });
    }
  })().catch(() => {});
  return engine;
}

/** A bridge with recording hooks, connected (handshake done) unless `open: false`. */
async function connected(t, { handlers, onCall, open = true } = {}) {
  const engine = await fakeEngine(handlers);
  const seen = { log: [], timeouts: [], lost: [] };
  const bridge = new Bridge({
    onCall: onCall ?? (async () => ({ result: {} })),
    beforeSend: () => seen.log.push('beforeSend'),
    onLost: (why) => seen.lost.push(why),
    onTimeout: (method) => seen.timeouts.push(method),
  });
  t.after(() => {
    bridge.dispose();
    engine.close();
  });
  const welcome = open ? await bridge.open(engine.endpoint, { pid: 42, secret: 's3cret' }, 5000) : undefined;
  return { engine, bridge, seen, welcome };
}

describe('Bridge', () => {
  test('open() handshakes with hello (protocol 1 and the hello fields), then the bridge is ready', async (t) => {
    const { engine, bridge, seen, welcome } = await connected(t);
    assert.equal(bridge.ready, true);
    assert.deepEqual(welcome.result, { protocol: 1, dialect: 'test' });
    const [hello] = engine.of('call', 'hello');
    assert.deepEqual(hello.params, { protocol: 1, pid: 42, secret: 's3cret' });
    assert.deepEqual(seen.log, [], 'the handshake does not flush the mirror');
    bridge.notify('session.closed', { sessionId: 'a' });
    await engine.until((r) => r.some((m) => m.kind === 'notify'), 'the notify');
    assert.deepEqual(engine.of('notify')[0], { v: 1, kind: 'notify', method: 'session.closed', params: { sessionId: 'a' } });
  });

  test('a handshake the engine never answers rejects within its timeout; the bridge stays not ready', async (t) => {
    const { engine, bridge } = await connected(t, { handlers: { hello: undefined }, open: false });
    const started = Date.now();
    await assert.rejects(bridge.open(engine.endpoint, {}, 200), EngineUnavailableError);
    assert.ok(Date.now() - started >= 190);
    assert.equal(bridge.ready, false);
    await assert.rejects(bridge.call('turn.preStep', {}), EngineUnavailableError);
  });

  test('a call the engine never answers rejects within timeoutMs, sends cancel and fires onTimeout', async (t) => {
    const { engine, bridge, seen } = await connected(t, { handlers: { echo: (msg) => ({ result: msg.params }) } });
    const started = Date.now();
    const error = await bridge.call('compact.now', { sessionId: 'a' }, { timeoutMs: 300 }).catch((e) => e);
    const took = Date.now() - started;
    assert.ok(error instanceof EngineUnavailableError, String(error));
    assert.match(error.message, /did not answer compact\.now within 300 ms/);
    assert.ok(took >= 290 && took < 2300, `rejected after ${took} ms`);
    assert.deepEqual(seen.timeouts, ['compact.now']);
    const [call] = engine.of('call', 'compact.now');
    await engine.until((r) => r.some((m) => m.kind === 'cancel'), 'the cancel');
    assert.deepEqual(engine.of('cancel'), [{ v: 1, kind: 'cancel', id: call.id }]);
    // a late answer is dropped; the bridge goes on
    await engine.send({ kind: 'reply', id: call.id, result: { late: true } });
    assert.deepEqual((await bridge.call('echo', { n: 1 })).result, { n: 1 });
    assert.deepEqual(seen.timeouts, ['compact.now']);
  });

  test('many concurrent calls and notifies never hit EBUSY: all are sent in order and every call gets its own answer', async (t) => {
    const { engine, bridge } = await connected(t, { handlers: { echo: (msg) => ({ result: { n: msg.params.n } }) } });
    const n = 1500; // zeromq resolves at most 512 sends synchronously, then a send in flight makes the next one throw EBUSY
    const calls = [];
    for (let i = 0; i < n; i++) {
      calls.push(bridge.call('echo', { n: i }, { timeoutMs: 20000 }));
      bridge.notify('session.events', { n: i }, Buffer.from(`[${i}]`));
    }
    const answers = await Promise.all(calls);
    assert.deepEqual(answers.map((a) => a.result.n), [...Array(n).keys()]);
    await engine.until((r) => r.filter((m) => m.kind === 'notify').length === n, `${n} notifies`);
    const sent = engine.received.filter((m) => m.method !== 'hello').map((m) => `${m.kind}:${m.params.n}`);
    assert.deepEqual(sent, [...Array(n).keys()].flatMap((i) => [`call:${i}`, `notify:${i}`]));
    assert.equal(engine.of('notify')[7].payload.toString(), '[7]');
  });

  test('every call flushes the mirror (beforeSend) first', async (t) => {
    const { bridge, seen } = await connected(t, { handlers: { echo: (msg) => ({ result: msg.params }) } });
    await bridge.call('echo', {});
    await bridge.call('echo', {});
    assert.deepEqual(seen.log, ['beforeSend', 'beforeSend']);
  });

  test('an abort signal cancels the call: it rejects with the reason and the engine gets cancel', async (t) => {
    const { engine, bridge } = await connected(t, { handlers: { echo: (msg) => ({ result: msg.params }) } });
    const controller = new AbortController();
    const pending = bridge.call('turn.preStep', {}, { signal: controller.signal, timeoutMs: 20000 });
    await engine.until((r) => r.some((m) => m.method === 'turn.preStep'), 'the call');
    const reason = new Error('the user pressed Esc');
    controller.abort(reason);
    await assert.rejects(pending, (error) => error === reason);
    const [call] = engine.of('call', 'turn.preStep');
    await engine.until((r) => r.some((m) => m.kind === 'cancel'), 'the cancel');
    assert.deepEqual(engine.of('cancel'), [{ v: 1, kind: 'cancel', id: call.id }]);

    // already aborted: the call is never sent, only its cancel
    const early = new AbortController();
    early.abort(new Error('too late'));
    await assert.rejects(bridge.call('turn.request', {}, { signal: early.signal }), /too late/);
    await bridge.call('echo', {}); // sent after it, so received after it
    assert.equal(engine.of('call', 'turn.request').length, 0);
    assert.equal(engine.of('cancel').length, 2);
  });

  test('liveness: a long call fails fast when the pings go unanswered', async (t) => {
    const { engine, bridge } = await connected(t, { handlers: { ping: undefined } });
    const started = Date.now();
    const error = await bridge.call('compact.ifNeeded', {}, { timeoutMs: 30000, liveness: { everyMs: 100, withinMs: 150 } }).catch((e) => e);
    const took = Date.now() - started;
    assert.ok(error instanceof EngineUnavailableError, String(error));
    assert.match(error.message, /stopped answering during compact\.ifNeeded/);
    assert.ok(took >= 240 && took < 3000, `failed after ${took} ms, not after its 30 s timeout`);
    const [call] = engine.of('call', 'compact.ifNeeded');
    await engine.until((r) => r.some((m) => m.kind === 'cancel' && m.id === call.id), 'the cancel of the call');
  });

  test('liveness: answered pings keep a long call alive until its answer', async (t) => {
    const { engine, bridge } = await connected(t, {
      handlers: { 'compact.now': async () => { await sleep(700); return { result: { done: true } }; } },
    });
    const { result } = await bridge.call('compact.now', {}, { timeoutMs: 30000, liveness: { everyMs: 100, withinMs: 500 } });
    assert.deepEqual(result, { done: true });
    assert.ok(engine.of('call', 'ping').length >= 3);
    await sleep(50); // a ping sent just before the answer may still be on its way
    const pings = engine.of('call', 'ping').length;
    await sleep(400);
    assert.equal(engine.of('call', 'ping').length, pings, 'the pings stop with the call');
  });

  test('a reply with an error becomes an EngineCallError with its code, message, fix and manual', async (t) => {
    const { bridge } = await connected(t, {
      handlers: {
        refuse: () => ({ error: { code: 'config', message: 'unknown key turns.landingBarier', fix: 'spell it landingBarrier', manual: 'busy' } }),
        bare: () => ({ error: {} }),
      },
    });
    const error = await bridge.call('refuse', {}).catch((e) => e);
    assert.ok(error instanceof EngineCallError);
    assert.equal(error.name, 'EngineCallError');
    assert.deepEqual([error.code, error.message, error.fix, error.manual], ['config', 'unknown key turns.landingBarier', 'spell it landingBarrier', 'busy']);
    const bare = await bridge.call('bare', {}).catch((e) => e);
    assert.deepEqual([bare.code, bare.message, bare.fix], ['internal', 'engine call failed', undefined]);
  });

  test("a reply's payload frame and the call's stream messages come back", async (t) => {
    const { engine, bridge } = await connected(t, {
      handlers: {
        'worker.result': (msg) => {
          engine.send({ kind: 'stream', id: msg.id, params: { part: 1 } });
          engine.send({ kind: 'stream', id: msg.id, params: { part: 2 } });
          return { result: { ok: true }, payload: Buffer.from('[{"seq":1}]') };
        },
      },
    });
    const streamed = [];
    const answer = await bridge.call('worker.result', {}, { onStream: (params) => streamed.push(params) });
    assert.deepEqual(answer.result, { ok: true });
    assert.equal(answer.payload.toString(), '[{"seq":1}]');
    assert.deepEqual(streamed, [{ part: 1 }, { part: 2 }]);
  });

  test('an engine call is served by onCall: streams, then the reply with its payload, after the mirror is flushed', async (t) => {
    const { engine, seen } = await connected(t, {
      onCall: async (method, params, payload, io) => {
        seen.log.push(`onCall ${method} ${JSON.stringify(params)} ${payload}`);
        io.stream({ chunks: ['a'] });
        await sleep(10);
        return { result: { ok: true, seqs: [4] }, payload: Buffer.from('out') };
      },
    });
    await engine.send({ kind: 'call', id: 'e1', method: 'session.apply', params: { sessionId: 'a' } }, Buffer.from('[]'));
    await engine.until((r) => r.some((m) => m.kind === 'reply'), 'the reply');
    assert.deepEqual(seen.log, ['onCall session.apply {"sessionId":"a"} []', 'beforeSend']);
    const [stream, reply] = engine.received.filter((m) => m.id === 'e1');
    assert.deepEqual(stream, { v: 1, kind: 'stream', id: 'e1', params: { chunks: ['a'] } });
    assert.deepEqual({ ...reply, payload: reply.payload.toString() }, { v: 1, kind: 'reply', id: 'e1', result: { ok: true, seqs: [4] }, payload: 'out' });
  });

  test('an engine call that throws is answered with an error reply; an engine cancel aborts the call', async (t) => {
    let signal;
    const { engine } = await connected(t, {
      onCall: async (method, params, payload, io) => {
        if (method === 'session.flush') throw Object.assign(new Error('session a is not open'), { code: 'unknown-session' });
        if (method === 'llm.stream') {
          signal = io.signal;
          await new Promise((resolve) => io.signal.addEventListener('abort', resolve));
          throw io.signal.reason;
        }
        throw Object.assign(new Error('odd'), { code: 7 });
      },
    });
    await engine.send({ kind: 'call', id: 'e1', method: 'session.flush', params: {} });
    await engine.send({ kind: 'call', id: 'e2', method: 'llm.stream', params: {} });
    await engine.send({ kind: 'call', id: 'e3', method: 'other', params: {} });
    await engine.until((r) => r.filter((m) => m.kind === 'reply').length === 2, 'two replies');
    await engine.send({ kind: 'cancel', id: 'e2' });
    await engine.until((r) => r.filter((m) => m.kind === 'reply').length === 3, 'the third reply');
    const error = (id) => engine.received.find((m) => m.kind === 'reply' && m.id === id).error;
    assert.deepEqual(error('e1'), { code: 'unknown-session', message: 'session a is not open' });
    assert.deepEqual(error('e3'), { code: 'shim-error', message: 'odd' });
    assert.deepEqual(error('e2'), { code: 'shim-error', message: 'cancelled by the engine' });
    assert.equal(signal.aborted, true);
  });

  test('close() rejects pending calls; nothing is sent while not connected; dispose() refuses a reopen', async (t) => {
    const { engine, bridge } = await connected(t);
    const pending = bridge.call('compact.now', {}, { timeoutMs: 20000 });
    await engine.until((r) => r.some((m) => m.method === 'compact.now'), 'the call');
    bridge.close('exited');
    await assert.rejects(pending, (e) => e instanceof EngineUnavailableError && e.message === 'turn-memory engine exited');
    assert.equal(bridge.ready, false);
    await assert.rejects(bridge.call('compact.now', {}), EngineUnavailableError);
    bridge.notify('session.closed', {}); // dropped, does not throw

    const fresh = new Bridge({ onCall: async () => ({}), beforeSend: () => {} });
    await assert.rejects(fresh.call('ping', {}), EngineUnavailableError);
    fresh.dispose();
    await assert.rejects(fresh.open(engine.endpoint, {}, 1000), /shutting down/);
  });
});

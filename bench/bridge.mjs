// Bridge + mirror benchmark: the shim's real Bridge, Mirror and EngineProcess against the
// real Python engine (`python -m turn_memory serve`), next to in-process baselines.
// Run it through bench/bridge.py, which provides Node 22, zeromq and the engine command.
//
//   node bench/bridge.mjs --engine-command '["python","-m","turn_memory","serve"]'
//        [--calls N] [--events N] [--repeats N] [--json]
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { Bridge } from '../shim-js/lib/bridge.js';
import { EngineProcess } from '../shim-js/lib/engine-process.js';
import { Mirror } from '../shim-js/lib/mirror.js';

const { values: args } = parseArgs({
  options: {
    'engine-command': { type: 'string' },
    calls: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '500' },
    events: { type: 'string', default: '20000' },
    repeats: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
  },
});
if (!args['engine-command']) {
  console.error('bench: --engine-command \'["python","-m","turn_memory","serve"]\' is required (use bench/bridge.py)');
  process.exit(2);
}
const ENGINE_COMMAND = JSON.parse(args['engine-command']);
const CALLS = Number(args.calls);
const WARMUP = Number(args.warmup);
const EVENTS = Number(args.events);
const REPEATS = Math.max(1, Number(args.repeats));

const PROVIDER = 'deepseek-official';
const MODEL = 'deepseek-v4-flash';
const now = () => process.hrtime.bigint();
const us = (ns) => Number(ns) / 1000;
const tick = () => new Promise((resolve) => setImmediate(resolve));

// ---------------------------------------------------------------------------------------
// engine under test
// ---------------------------------------------------------------------------------------
/** Engine stderr (and EngineProcess warnings), scanned at the end for errors. */
const engineLog = [];
const engineCalls = [];
const BAD_LINE = /\b(ERROR|CRITICAL)\b|Traceback|\bgap\b|resync/i;

async function startEngine(transport) {
  let ready;
  const readyP = new Promise((resolve, reject) => {
    ready = resolve;
    setTimeout(() => reject(new Error(`engine (${transport}) did not start within 30 s`)), 30000).unref();
  });
  let mirror;
  const bridge = new Bridge({
    // the engine calls the shim only for session.resync / flush / apply / llm.stream:
    // none of them may happen here
    onCall: async (method, params) => {
      engineCalls.push({ method, params });
      return { result: null };
    },
    beforeSend: () => mirror.flush(),
    onLost: (why) => engineLog.push(`[bench] connection lost: ${why}`),
    onTimeout: (method) => engineLog.push(`[bench] ERROR call timed out: ${method}`),
  });
  mirror = new Mirror(bridge);
  let exited = null;
  const proc = new EngineProcess({
    command: ENGINE_COMMAND,
    transport,
    restartDelayMs: 60000, // never restart during a run: a crash must fail the bench
    logger: {
      info: (line) => engineLog.push(line),
      warn: (line) => engineLog.push(`[engine-process] ${line}`),
    },
    onReady: (endpoint, secret) => ready({ endpoint, secret }),
    onExit: (why) => { exited = why; engineLog.push(`[bench] ERROR engine ${why}`); },
  });
  const t0 = now();
  proc.start();
  const { endpoint, secret } = await readyP;
  const { result } = await bridge.open(endpoint, {
    dshVersion: '0.1.0-rc.8',
    dialect: 'rc8',
    pid: process.pid,
    secret,
    checkpointSource: { kind: 'plugin', plugin: 'compact', compactionId: 'probe' },
    // the mirror alone: no turn jobs or compaction answering back through a shim that has
    // no session to apply to (they would add their own work to every measured event)
    config: { turns: { enabled: false }, compaction: { auto: false } },
  }, 20000);
  mirror.elide = result?.elide ?? [];
  mirror.elideExcept = result?.elideExcept ?? [];
  const startMs = us(now() - t0) / 1000;
  return {
    transport, endpoint, bridge, mirror, proc, startMs, elide: result?.elide ?? [],
    engineVersion: result?.engineVersion,
    get exited() { return exited; },
    stop() { bridge.dispose(); proc.stop(); },
  };
}

// ---------------------------------------------------------------------------------------
// 1. bridge round trip
// ---------------------------------------------------------------------------------------
function percentiles(samples) {
  const s = Float64Array.from(samples).sort();
  const at = (q) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
  return { p50: at(0.5), p99: at(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length, n: s.length };
}

async function benchPing(engine) {
  for (let i = 0; i < WARMUP; i++) await engine.bridge.call('ping', { echo: i });
  const samples = new Float64Array(CALLS);
  for (let i = 0; i < CALLS; i++) {
    const t0 = now();
    const { result } = await engine.bridge.call('ping', { echo: i });
    samples[i] = us(now() - t0);
    if (result?.echo !== i) throw new Error(`ping ${i} answered ${JSON.stringify(result)}`);
  }
  return percentiles(samples);
}

async function benchNoop() {
  const noop = async () => {};
  for (let i = 0; i < WARMUP; i++) await noop();
  const samples = new Float64Array(CALLS);
  for (let i = 0; i < CALLS; i++) {
    const t0 = now();
    await noop();
    samples[i] = us(now() - t0);
  }
  return percentiles(samples);
}

// ---------------------------------------------------------------------------------------
// 2. a realistic DSH 0.1.0-rc.8 session log
// ---------------------------------------------------------------------------------------
function deepFreeze(value) {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

const WORDS = ('the parser module reads each token from the stream and hands it to the resolver which '
  + 'checks scopes imports and types before the emitter writes the output file so a failing test '
  + 'usually points at one of these three stages let me look at the code and the recent changes').split(' ');

function words(n, seed) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(WORDS[(seed * 7 + i * 13) % WORDS.length]);
  return out;
}

let SYSTEM_PROMPT;
function systemPrompt() {
  if (SYSTEM_PROMPT === undefined) {
    const lines = [];
    for (let i = 0, size = 0; size < 24000; i++) {
      const line = `${i % 12 === 0 ? `\n## Section ${i / 12}\n` : ''}- ${words(18, i).join(' ')}.`;
      lines.push(line);
      size += line.length + 1;
    }
    SYSTEM_PROMPT = lines.join('\n');
  }
  return SYSTEM_PROMPT;
}

let TOOLS;
function tools() {
  const names = ['bash', 'read_file', 'write_file', 'str_replace', 'glob', 'grep', 'web_fetch', 'web_search',
    'todo_write', 'ask_user', 'subagent', 'skill'];
  TOOLS ??= names.map((name, i) => ({
    name,
    description: `${name}: ${words(60, i).join(' ')}.`,
    parameters: {
      type: 'object',
      properties: {
        command: { type: 'string', description: words(20, i + 1).join(' ') },
        path: { type: 'string', description: words(12, i + 2).join(' ') },
        timeout: { type: 'integer', minimum: 1, maximum: 600, description: 'seconds' },
      },
      required: ['command'],
      additionalProperties: false,
    },
  }));
  return TOOLS;
}

function toolOutput(turn, bytes) {
  const lines = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = `src/parser/stage_${turn}_${i}.ts:${10 + i}:  ${words(9, turn + i).join(' ')}`;
    lines.push(line);
    size += line.length + 1;
  }
  return lines.join('\n');
}

/**
 * A log shaped like a real rc8 agent session, plus how the agent loop would have appended
 * it: `groups` are the synchronous runs of appends between two macrotasks (a streamed chunk
 * arrives on its own; assistant/message and its tool/call go together; …).
 * It ends inside an open turn right after a tool/result (the ingestion probe relies on it).
 */
function buildSession(targetEvents) {
  const events = [];
  const groups = [];
  let group = null;
  const open = () => { group = []; groups.push(group); };
  const add = (type, data, surface) => {
    const event = { type, seq: events.length, time: 1796000000000 + events.length * 7, data, ...surface };
    deepFreeze(event);
    events.push(event);
    group.push(event);
    return event.seq;
  };
  const header = (reason) => add('request/header', {
    header: { config: { provider: PROVIDER, model: MODEL, reasoningEffort: 'high' }, system: systemPrompt(), tools: tools() },
    reason,
  });
  const stream = (turn, step, { reasoning, text, toolCall }) => {
    const seqs = [];
    const chunk = (c) => { open(); seqs.push(add('assistant/chunk', { turn, step, chunk: c })); };
    let index = 0;
    const blocks = [];
    if (reasoning) {
      chunk({ type: 'block-start', index, blockType: 'reasoning' });
      const parts = words(reasoning, turn);
      for (const w of parts) chunk({ type: 'reasoning-delta', index, text: `${w} ` });
      const block = { type: 'reasoning', text: parts.join(' ') };
      chunk({ type: 'block-end', index, block });
      blocks.push(block);
      index++;
    }
    if (text) {
      chunk({ type: 'block-start', index, blockType: 'text' });
      const parts = words(text, turn + 3);
      for (const w of parts) chunk({ type: 'text-delta', index, text: `${w} ` });
      const block = { type: 'text', text: parts.join(' ') };
      chunk({ type: 'block-end', index, block });
      blocks.push(block);
      index++;
    }
    if (toolCall) {
      const id = `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`;
      const args = JSON.stringify({ command: `grep -rn "stage_${turn}" src/parser | head -200`, timeout: 60 });
      chunk({ type: 'block-start', index, blockType: 'tool-call' });
      chunk({ type: 'tool-call-delta', index, id, name: 'bash', argumentsDelta: '' });
      for (let i = 0; i < args.length; i += 6) chunk({ type: 'tool-call-delta', index, id, argumentsDelta: args.slice(i, i + 6) });
      const block = { type: 'tool-call', id, name: 'bash', arguments: args };
      chunk({ type: 'block-end', index, block });
      blocks.push(block);
    }
    const usage = { inputTokens: 12000 + turn * 900, outputTokens: 40 + seqs.length, cacheReadTokens: 11000 + turn * 850, reasoningTokens: reasoning ?? 0 };
    chunk({ type: 'usage', usage });
    chunk({ type: 'finish', reason: { kind: toolCall ? 'tool-calls' : 'stop' } });
    return { seqs, blocks, usage };
  };
  const assistant = (turn, step, streamed) => add('assistant/message', {
    turn, step,
    message: { id: randomUUID(), role: 'assistant', source: { kind: 'model', provider: PROVIDER, model: MODEL }, content: streamed.blocks },
    usage: streamed.usage,
  }, { surfaceOp: 'append', sourceEventSeqs: streamed.seqs });

  const toolStep = (turn, step, first) => {
    open();
    if (step === 1) add('step/start', { turn, step });
    if (first) {
      add('user/message', {
        id: randomUUID(), role: 'user', source: { kind: 'user' },
        content: [{ type: 'text', text: `Step ${turn}: ${words(40, turn).join(' ')}` }],
      }, { surfaceOp: 'append' });
    }
    if (turn === 1 && first) {
      header('initial');
      add('request/context', { provider: PROVIDER, model: MODEL, contextWindow: 1000000 });
    } else if (first && turn % 10 === 0) {
      header('change'); // e.g. a skill or MCP server changed the tool list
    }
    const streamed = stream(turn, step, { reasoning: 30, text: 12, toolCall: true });
    open();
    assistant(turn, step, streamed);
    const call = streamed.blocks.at(-1);
    const callSeq = add('tool/call', { turn, step, callId: call.id, name: call.name, arguments: call.arguments });
    open(); // the tool runs for a while
    const resultSeq = add('tool/result', {
      turn, step,
      message: {
        id: randomUUID(), role: 'user', source: { kind: 'tool', callId: call.id },
        content: [{ type: 'tool-result', toolCallId: call.id, content: [{ type: 'text', text: toolOutput(turn, 2000 + (turn % 5) * 1000) }], isError: false }],
      },
    }, { surfaceOp: 'append', sourceEventSeqs: [callSeq] });
    return resultSeq;
  };

  open();
  add('permission/preset', { preset: 'workspace-write' });
  let turn = 0;
  let lastResult = -1;
  for (;;) {
    turn++;
    open();
    add('turn/start', { turn });
    lastResult = toolStep(turn, 1, true);
    if (events.length >= targetEvents) break; // end inside the open turn, right after a tool/result
    add('step/end', { turn, step: 1 });
    add('step/start', { turn, step: 2 });
    const streamed = stream(turn, 2, { text: 25 });
    open();
    assistant(turn, 2, streamed);
    add('step/end', { turn, step: 2 });
    add('turn/end', { turn, reason: { kind: 'completed' } });
  }
  return { events, groups, turns: turn, lastToolResult: lastResult };
}

function logStats(session, elide) {
  const byType = new Map();
  let bytes = 0;
  let wireBytes = 0;
  const elided = new Set(elide);
  for (const e of session.events) {
    byType.set(e.type, (byType.get(e.type) ?? 0) + 1);
    const full = JSON.stringify(e).length;
    bytes += full;
    wireBytes += elided.has(e.type) ? JSON.stringify({ type: e.type, seq: e.seq, time: e.time, data: null }).length : full;
  }
  return {
    events: session.events.length,
    turns: session.turns,
    batches: session.groups.length,
    chunkShare: (byType.get('assistant/chunk') ?? 0) / session.events.length,
    logBytes: bytes,
    wireBytes,
    byType: Object.fromEntries([...byType].sort((a, b) => b[1] - a[1])),
  };
}

// ---------------------------------------------------------------------------------------
// 2. mirroring cost
// ---------------------------------------------------------------------------------------
/**
 * Append `session.events` the way the agent loop does (one group per macrotask), calling
 * `listener(session, event)` for each: the `session/event` firehose. Returns the time
 * spent inside the listener calls, the main thread's CPU time and the wall time.
 */
async function feed(session, listener) {
  const fake = { id: `bench-${randomUUID()}`, events: [], header: {}, seq: 0 };
  const agent = { session: fake };
  listener.begin?.(agent);
  const log = fake.events;
  let inListener = 0n;
  const cpu0 = process.threadCpuUsage();
  const t0 = now();
  for (const group of session.groups) {
    for (const event of group) log.push(event);
    fake.seq = log.length;
    const s = now();
    for (const event of group) listener.onEvent(fake, event);
    inListener += now() - s;
    await tick();
  }
  const cpu = process.threadCpuUsage(cpu0);
  const fed = now();
  await listener.settle();
  const done = now();
  return {
    agent,
    listenerUs: us(inListener),
    cpuUs: cpu.user + cpu.system,
    feedUs: us(fed - t0),
    totalUs: us(done - t0),
    sessionId: fake.id,
  };
}

function mirrorListener(engine) {
  const { mirror, bridge } = engine;
  // Instance-level wrap of the real flush (the class is untouched): #schedule and the
  // bridge's beforeSend both call `this.flush()`, so every flush is timed.
  let inFlush = 0n;
  let flushes = 0;
  const flush = Mirror.prototype.flush;
  mirror.flush = function timedFlush() {
    const s = now();
    flush.call(this);
    inFlush += now() - s;
    flushes++;
  };
  return {
    begin(agent) { mirror.track(agent); inFlush = 0n; flushes = 0; },
    onEvent: (session, event) => mirror.onEvent(session, event),
    // ordering: the engine handles a call only after every batch sent before it
    settle: () => bridge.call('ping', { echo: 'settle' }),
    get flushUs() { return us(inFlush); },
    get flushes() { return flushes; },
  };
}

function baselineListener() {
  let sink = [];
  const noop = async () => {};
  return {
    begin() { sink = []; },
    onEvent: (session, event) => { sink.push(event); },
    settle: () => noop(),
    get flushUs() { return 0; },
    get received() { return sink.length; },
  };
}

/** Fold check: the engine mirrored the whole log (probe: compact.region on the last tool/result). */
async function probeIngested(engine, session, sessionId) {
  const seq = session.lastToolResult;
  try {
    await engine.bridge.call('compact.region', {
      sessionId, logLength: session.events.length, start: seq, end: seq, agentOptions: {},
    }, { timeoutMs: 10000 });
  } catch (error) {
    // mirrored in full: the tool/result is on the surface and its call is still open before it
    if (error.code === 'bad-range' && /splits a tool call\/result pair/.test(error.message)) return true;
    throw new Error(`ingestion probe: expected the engine to hold seq ${seq}, got ${error.code}: ${error.message}`);
  }
  throw new Error('ingestion probe: compact.region unexpectedly succeeded');
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

async function benchMirror(engine, session) {
  const n = session.events.length;
  // warm-up: JIT on both sides, the engine's import-time caches
  const warm = buildSession(Math.min(3000, n));
  await feed(warm, baselineListener());
  const w = await feed(warm, mirrorListener(engine));
  await probeIngested(engine, warm, w.sessionId);
  engine.mirror.untrack(w.agent);

  const runs = { mirror: [], baseline: [] };
  for (let r = 0; r < REPEATS; r++) {
    const base = baselineListener();
    const { agent: _unused, ...b } = await feed(session, base);
    if (base.received !== n) throw new Error(`baseline listener saw ${base.received} of ${n} events`);
    runs.baseline.push(b);

    const m = mirrorListener(engine);
    const { agent, ...res } = await feed(session, m);
    res.flushUs = m.flushUs;
    res.flushes = m.flushes;
    res.ingested = await probeIngested(engine, session, res.sessionId);

    // a reset (reconnect / engine restart): the whole log in one batch, folded from scratch
    const t0 = now();
    engine.mirror.reset(res.sessionId);
    await engine.bridge.call('ping', { echo: 'reset' });
    res.resetUs = us(now() - t0);
    engine.mirror.untrack(agent);
    runs.mirror.push(res);
  }
  const pick = (side, f) => median(runs[side].map(f));
  return {
    runs,
    shimSync: { tm: pick('mirror', (r) => (r.listenerUs + r.flushUs) / n), base: pick('baseline', (r) => r.listenerUs / n) },
    onEvent: pick('mirror', (r) => r.listenerUs / n),
    flushPerBatch: pick('mirror', (r) => r.flushUs / r.flushes),
    flushes: runs.mirror[0].flushes,
    cpu: { tm: pick('mirror', (r) => r.cpuUs / n), base: pick('baseline', (r) => r.cpuUs / n) },
    e2e: { tm: pick('mirror', (r) => r.totalUs / n), base: pick('baseline', (r) => r.totalUs / n) },
    feedWall: { tm: pick('mirror', (r) => r.feedUs / n), base: pick('baseline', (r) => r.feedUs / n) },
    reset: pick('mirror', (r) => r.resetUs / n),
    resetTotalMs: pick('mirror', (r) => r.resetUs / 1000),
  };
}

// ---------------------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------------------
function fmt(usValue) {
  if (usValue === undefined || usValue === null || Number.isNaN(usValue)) return '—';
  if (usValue < 1) return `${(usValue * 1000).toFixed(0)} ns`;
  if (usValue < 10) return `${usValue.toFixed(2)} µs`;
  if (usValue < 1000) return `${usValue.toFixed(1)} µs`;
  if (usValue < 1e6) return `${(usValue / 1000).toFixed(2)} ms`;
  return `${(usValue / 1e6).toFixed(2)} s`;
}

function ratio(a, b) {
  if (!b || a === undefined || b === undefined) return '—';
  const r = a / b;
  return r >= 100 ? `${Math.round(r).toLocaleString('en-US')}×` : `${r.toFixed(r >= 10 ? 0 : 1)}×`;
}

function table(rows) {
  const head = ['metric', 'turn-memory', 'baseline', 'ratio'];
  const cells = rows.map((r) => (r.section ? null : [r.metric, fmt(r.tm), r.baseLabel ?? fmt(r.base), r.base ? ratio(r.tm, r.base) : '—']));
  const widths = head.map((h, i) => Math.max(h.length, ...cells.filter(Boolean).map((c) => c[i].length)));
  const line = (c) => c.map((x, i) => (i === 0 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  ');
  const out = [line(head), widths.map((w) => '-'.repeat(w)).join('  ')];
  rows.forEach((r, i) => out.push(r.section ? r.section : line(cells[i])));
  return out.join('\n');
}

async function main() {
  // resolved the way the shim resolves it (from shim-js/lib), not from bench/
  let zmqVersion = 'unknown';
  try {
    const entry = createRequire(new URL('../shim-js/lib/bridge.js', import.meta.url)).resolve('zeromq');
    zmqVersion = JSON.parse(readFileSync(join(entry.replace(/[\\/]lib[\\/][^\\/]*$/, ''), 'package.json'), 'utf8')).version;
  } catch { /* informational only */ }
  const cpus = os.cpus();
  const pyInfo = process.env.BENCH_PYTHON_INFO ?? '';
  const machine = {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model?.trim() ?? 'unknown',
    platform: `${process.platform}-${process.arch}`,
    node: process.version,
    zeromqJs: zmqVersion,
    python: pyInfo,
  };
  const failures = [];
  const t0 = now();

  const session = buildSession(EVENTS);
  const noop = await benchNoop();

  const ipc = await startEngine('ipc');
  const pingIpc = await benchPing(ipc);
  const stats = logStats(session, ipc.elide);
  const mirror = await benchMirror(ipc, session);
  const ipcExited = ipc.exited;
  ipc.stop();

  const tcp = await startEngine('tcp');
  const pingTcp = await benchPing(tcp);
  const tcpExited = tcp.exited;
  tcp.stop();
  await new Promise((resolve) => setTimeout(resolve, 300)); // let the engines' last stderr lines arrive
  const wallS = us(now() - t0) / 1e6;

  if (ipcExited || tcpExited) failures.push(`engine exited during the run: ${ipcExited ?? tcpExited}`);
  const bad = engineLog.filter((l) => BAD_LINE.test(l));
  if (bad.length) failures.push(`engine logged ${bad.length} error/gap/resync line(s):\n  ${bad.slice(0, 10).join('\n  ')}`);
  if (engineCalls.length) failures.push(`engine called the shim ${engineCalls.length}× (${[...new Set(engineCalls.map((c) => c.method))].join(', ')}): expected none`);

  const n = stats.events;
  const rows = [
    { section: `bridge round trip: bridge.call('ping'), ${CALLS} calls after ${WARMUP} warm-up (baseline: await async no-op)` },
    { metric: 'ping ipc p50', tm: pingIpc.p50, base: noop.p50 },
    { metric: 'ping ipc p99', tm: pingIpc.p99, base: noop.p99 },
    { metric: 'ping tcp p50', tm: pingTcp.p50, base: noop.p50 },
    { metric: 'ping tcp p99', tm: pingTcp.p99, base: noop.p99 },
    { section: `mirroring, per event: ${n} rc8 events (${(stats.chunkShare * 100).toFixed(0)}% assistant/chunk), ${stats.batches} batches, median of ${REPEATS} (baseline: session/event listener that pushes to an array)` },
    { metric: '(a) shim sync: onEvent + flush', tm: mirror.shimSync.tm, base: mirror.shimSync.base },
    { metric: '(a) main-thread CPU, whole feed', tm: mirror.cpu.tm, base: mirror.cpu.base },
    { metric: '(b) end to end: feed + engine fold', tm: mirror.e2e.tm, base: mirror.e2e.base },
    { metric: '    reset: whole log in one batch', tm: mirror.reset, base: null, baseLabel: '—' },
  ];
  const report = {
    machine,
    config: { calls: CALLS, warmup: WARMUP, events: EVENTS, repeats: REPEATS, engineCommand: ENGINE_COMMAND },
    engine: { version: ipc.engineVersion, elide: ipc.elide, startMs: { ipc: ipc.startMs, tcp: tcp.startMs } },
    ping: { ipc: pingIpc, tcp: pingTcp, noop },
    log: stats,
    mirror: {
      shimSyncPerEventUs: mirror.shimSync,
      onEventPerEventUs: mirror.onEvent,
      flushPerBatchUs: mirror.flushPerBatch,
      flushes: mirror.flushes,
      mainThreadCpuPerEventUs: mirror.cpu,
      endToEndPerEventUs: mirror.e2e,
      feedWallPerEventUs: mirror.feedWall,
      resetPerEventUs: mirror.reset,
      resetTotalMs: mirror.resetTotalMs,
      runs: mirror.runs,
    },
    engineLog,
    wallS,
    failures,
  };
  if (args.json) {
    console.log(JSON.stringify(report, null, 2));
  } else {
    console.log(`machine: ${machine.cpus} CPUs (${machine.cpuModel}), ${machine.platform}; node ${machine.node}, zeromq.js ${machine.zeromqJs}; ${machine.python}`);
    console.log(`engine: turn-memory ${ipc.engineVersion} (${ENGINE_COMMAND.join(' ')}), start ${ipc.startMs.toFixed(0)} ms ipc / ${tcp.startMs.toFixed(0)} ms tcp; elides ${ipc.elide.join(', ') || 'nothing'}`);
    console.log(`log: ${n} events in ${stats.turns} turns, ${(stats.logBytes / 1e6).toFixed(1)} MB as JSON, ${(stats.wireBytes / 1e6).toFixed(1)} MB on the wire after elision`);
    console.log('');
    console.log(table(rows));
    console.log('');
    console.log(`detail: onEvent alone ${fmt(mirror.onEvent)}/event; flush ${fmt(mirror.flushPerBatch)}/batch over ${mirror.flushes} flushes (~${(n / mirror.flushes).toFixed(1)} events/batch); `
      + `feed wall ${fmt(mirror.feedWall.tm)} vs ${fmt(mirror.feedWall.base)}/event; reset of the whole log ${mirror.resetTotalMs.toFixed(0)} ms; ping mean ipc ${fmt(pingIpc.mean)}, tcp ${fmt(pingTcp.mean)}`);
    console.log(`ingestion verified (compact.region probe on seq ${session.lastToolResult}) in ${REPEATS}/${REPEATS} runs; engine stderr: ${engineLog.length} lines, ${bad.length} bad; total ${wallS.toFixed(1)} s`);
    for (const f of failures) console.log(`FAIL: ${f}`);
  }
  process.exit(failures.length ? 1 : 0);
}

main().catch((error) => {
  console.error(`bench failed: ${error?.stack ?? error}`);
  if (engineLog.length) console.error(`engine log (last 20 lines):\n  ${engineLog.slice(-20).join('\n  ')}`);
  process.exit(1);
});

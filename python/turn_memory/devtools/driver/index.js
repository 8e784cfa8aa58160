// Drives a real DSH agent through several turns in one process (the stock headless
// runner answers one task and exits, which leaves no time for background work).
// Config: { tasks: (string | {command} | {sleepMs} | {exec: argv} | {measure} | {send} | {waitIdle} | {image, text}
//   | {spawn, tasks, resume?} | {join} | {killSelf})[], resumeSessionId?, reportFile }.
// {spawn: name, tasks} opens another agent (a new session, or `resume` one) in this DSH process and runs
// its tasks alongside the main list (its records carry `agent: name`); {join: name} waits for them.
// {killSelf: true} flushes the sessions and SIGKILLs this DSH process (no shutdown runs).
// {image: path, text} is a turn whose user message carries that PNG, saved through DSH's attachment service.
// {send: text} starts a turn without waiting for it, so a following command runs mid-turn.
// {waitFile: path, contains, timeoutMs} polls until the file holds that text (e.g. an engine log line).
// A task starting with "/" runs as a human command (e.g. "/compact"). One JSON line per
// task goes to reportFile; the process exits when the tasks are done.
// Every pre-step of the driven agent also reports {preStep: {turn, step, ms}}: how long the
// step was held by the pre-step hooks (turn-memory's landing and compaction waits live there).
import { randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { inspect } from 'node:util';
import { installModelSelection } from '@deepseek-ai/dsh-agent';
import { createUserMessage } from '@deepseek-ai/dsh-llm';
import { SessionId } from '@deepseek-ai/dsh-session';

export const name = 'turn-memory-driver';
export const inject = ['agentDefaultModel', 'agents', 'sessions', 'appExit', 'tokenMeter'];

function report(config, record) {
  const line = JSON.stringify({ t: Date.now(), ...record }) + '\n';
  if (config.reportFile) appendFileSync(config.reportFile, line);
  else process.stdout.write(line);
}

// 0.1.0-rc.8 exposes session.events; 0.2.x replaced it with snapshotEvents()
const eventsOf = (session) => (typeof session.snapshotEvents === 'function' ? session.snapshotEvents() : session.events);

function outcome(events, fromSeq) {
  let text = '';
  let reason;
  for (const e of events) {
    if (e.seq < fromSeq) continue;
    if (e.type === 'assistant/message') {
      const t = e.data.message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      if (t) text = t;
    }
    if (e.type === 'turn/end') reason = e.data.reason;
  }
  return { text, reason };
}

// Every warning and error any plugin logs becomes a report record, on both hosts (0.2.x
// headless has no stderr exporter of its own), so a test can assert a run logged none.
function exportLogs(ctx, config) {
  ctx.logger?.exporter?.({
    levels: { default: 2 },
    export: ({ name, type, args }) => {
      if (type !== 'warn' && type !== 'error') return;
      report(config, { log: type, name, text: args.map((a) => (a instanceof Error ? a.stack ?? a.message : typeof a === 'string' ? a : inspect(a))).join(' ') });
    },
  });
}

/** Outermost pre-step hook (prepended): times the whole chain for the driven agent only. */
function timePreSteps(ctx, config, driven) {
  ctx.on('agent/pre-step', async (payload, next) => {
    if (payload.agent !== driven.agent) return next();
    const started = performance.now();
    try {
      return await next();
    } finally {
      report(config, { preStep: { turn: payload.turn, step: payload.step, ms: Math.round(performance.now() - started) } });
    }
  }, true);
}

async function run(ctx, config) {
  exportLogs(ctx, config);
  await ctx.get('loader')?.await();
  const driven = { agent: undefined };
  timePreSteps(ctx, config, driven);
  const selection = ctx.agentDefaultModel.currentSelection();
  const setup = (agentCtx) => {
    installModelSelection(agentCtx, { current: selection, assembled: undefined });
  };
  const agentOptions = { provider: selection.provider, model: selection.model };
  const open = (resumeSessionId) => (resumeSessionId
    ? ctx.agents.resume({ resumeSessionId: SessionId(resumeSessionId), agentOptions, setup })
    : ctx.agents.create({ sessionId: SessionId(`session-${randomUUID()}`), meta: { cwd: process.cwd() }, agentOptions, setup }));
  const { agent } = await open(config.resumeSessionId);
  driven.agent = agent;
  report(config, { session: agent.session.id, resumed: Boolean(config.resumeSessionId), events: agent.session.seq });
  await agent.whenIdle();
  // {spawn: name, tasks, resume?}: another agent (its own session) in this DSH process, running
  // its tasks alongside the main list; {join: name} waits for its tasks to finish
  const others = new Map();
  const opened = [agent];
  const spawn = async (task) => {
    const { agent: other } = await open(task.resume);
    opened.push(other);
    report(config, { agent: task.spawn, session: other.session.id, resumed: Boolean(task.resume), events: other.session.seq });
    await other.whenIdle();
    return { agent: other, ok: await runTasks(ctx, config, other, task.tasks ?? [], { agent: task.spawn }) };
  };
  const extra = {
    spawn: (task) => others.set(task.spawn, spawn(task)),
    join: async (name) => {
      const done = await others.get(name);
      report(config, { agent: name, joined: true, events: done?.agent.session.seq });
      return done?.ok ?? false;
    },
    killSelf: async () => {
      // SIGKILL after the sessions are durable: no shutdown hook runs, the engine loses its
      // stdin and exits, nothing in flight finishes (a crash, an OOM kill, a closed laptop)
      for (const a of opened) await ctx.sessions.flush(a.session);
      report(config, { killSelf: true, events: agent.session.seq });
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
    },
  };
  let ok = await runTasks(ctx, config, agent, config.tasks ?? [], {}, extra);
  for (const [name] of others) ok = (await extra.join(name)) && ok;
  await ctx.sessions.flush(agent.session);
  for (const a of opened.slice(1)) await ctx.sessions.flush(a.session);
  report(config, { done: true, session: agent.session.id, events: agent.session.seq, surface: [...agent.session.surface.nodes] });
  ctx.appExit(ok ? 0 : 1);
}

async function runTasks(ctx, config, agent, tasks, tag, extra = {}) {
  const say = (record) => report(config, { ...record, ...tag });
  let ok = true;
  for (const task of tasks) {
    if (typeof task === 'object' && task.spawn) {
      extra.spawn(task);
      continue;
    }
    if (typeof task === 'object' && task.join) {
      ok = (await extra.join(task.join)) && ok;
      continue;
    }
    if (typeof task === 'object' && task.killSelf) {
      await extra.killSelf();
      continue;
    }
    if (typeof task === 'object' && task.sleepMs) {
      await new Promise((resolve) => setTimeout(resolve, task.sleepMs));
      continue;
    }
    if (typeof task === 'object' && task.send) {
      agent.followup(createUserMessage({ content: [{ type: 'text', text: task.send }], source: { kind: 'user' } }));
      await new Promise((resolve) => setTimeout(resolve, task.afterMs ?? 200));
      continue;
    }
    if (typeof task === 'object' && task.waitFile) {
      const deadline = Date.now() + (task.timeoutMs ?? 30000);
      const holds = () => existsSync(task.waitFile) && readFileSync(task.waitFile, 'utf8').includes(task.contains ?? '');
      while (!holds() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      say({ waitFile: task.waitFile, found: holds() });
      continue;
    }
    if (typeof task === 'object' && task.waitIdle) {
      await agent.whenIdle();
      say({ idle: true, events: agent.session.seq });
      continue;
    }
    if (typeof task === 'object' && task.measure) {
      // DSH's own token meter must still price the session after turn-memory's landings
      try {
        const m = ctx.get('tokenMeter')?.measure(agent.session);
        say({ measure: true, totalTokens: m?.totalTokens, nodes: m?.nodes.length, baseline: m?.baseline.kind });
      } catch (error) {
        say({ measure: true, error: String(error?.message ?? error) });
      }
      continue;
    }
    if (typeof task === 'object' && task.exec) {
      const [file, ...args] = task.exec;
      const r = spawnSync(file, args, { encoding: 'utf8' });
      say({ exec: task.exec, status: r.status, stdout: r.stdout, stderr: r.stderr });
      continue;
    }
    if (typeof task === 'object' && task.image) {
      // what a client upload does: commit the bytes first, then send the durable ref
      const ref = await ctx.get('attachments').saveImage({ data: new Uint8Array(readFileSync(task.image)), mediaType: 'image/png', name: basename(task.image) });
      const from = agent.session.seq;
      agent.followup(createUserMessage({ content: [{ type: 'text', text: task.text ?? '' }, { type: 'image', attachment: ref }], source: { kind: 'user' } }));
      await agent.whenIdle();
      const out = outcome(eventsOf(agent.session), from);
      ok &&= out.reason?.kind === 'completed';
      say({ task: task.text ?? '', image: ref, text: out.text, reason: out.reason });
      continue;
    }
    const text = typeof task === 'string' ? task : task.command;
    const from = agent.session.seq;
    const started = Date.now();
    if (text.startsWith('/')) {
      const commands = ctx.get('commands');
      let result;
      try {
        result = commands ? await commands.execute(agent, text, [], AbortSignal.timeout(config.commandTimeoutMs ?? 120000)) : { kind: 'error', text: 'no command service' };
      } catch (error) {
        result = { kind: 'error', text: String(error?.message ?? error) };
      }
      say({ command: text, result: result?.result ?? result ?? null, ms: Date.now() - started, eventsBefore: from, eventsAfter: agent.session.seq });
      continue;
    }
    agent.followup(createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'user' } }));
    await agent.whenIdle();
    const out = outcome(eventsOf(agent.session), from);
    ok &&= out.reason?.kind === 'completed';
    say({ task: text, text: out.text, reason: out.reason, ms: Date.now() - started });
  }
  return ok;
}

export function apply(ctx, config) {
  run(ctx, config).catch((error) => {
    report(config, { error: String(error?.stack ?? error) });
    ctx.appExit(1);
  });
}

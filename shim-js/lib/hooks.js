// The DSH hooks the shim listens to, one named function each. Each one turns a host event
// into a mirror update or an engine call and carries out the answer; the engine decides.
// Every engine call fails open: an engine that is down, slow or refusing leaves the step
// exactly as DSH would run it without a compaction engine.
//
// `tm` is the TurnMemoryEngine (index.js): its bridge, mirror, workers and public tools, what
// the last handshake said (`handshake`), the per-agent step state (`atRequest`, `stepInput`),
// the engine section it runs with (`settings`) and its call helpers (`callEngine`,
// `liveness`, `whenStarted`).
import { CONTEXT_WINDOW_EXCEEDED_CODE } from '@deepseek-ai/dsh-llm';

import { routeOf } from './public-tools.js';
import { isSnapshot, isWorker } from './workers.js';

/** Wire every hook on the plugin's context. */
export function registerHooks(ctx, tm) {
  ctx.on('agent/created', ({ agent }) => agentCreated(tm, agent));
  ctx.on('agent/pre-step', (payload, next) => preStep(tm, payload, next));
  ctx.on('agent/request', (payload, next) => request(tm, payload, next));
  ctx.on('agent/request-error', (payload, next) => requestError(tm, payload, next));
  ctx.on('agent/disposed', ({ agent }) => tm.mirror.untrack(agent));
  ctx.on('session/event', (session, event) => sessionEvent(tm, session, event));
  ctx.on('agent/assistant-stream', ({ agent, frame }) => tm.mirror.onStreamFrame(agent, frame));
}

/** A user agent is mirrored and gets the memory tools; our own workers are isolated. */
export function agentCreated(tm, agent) {
  tm.workers.setup(agent); // our own children: isolate them (throws only for a worker we did not start)
  if (!isWorker(agent) && !(tm.handshake.skipSubagents && agent.session.header?.origin === 'subagent')) {
    tm.mirror.track(agent);
    tm.publicTools.attach(agent);
  }
}

function tracks(tm, agent) {
  return tm.mirror.entry(agent.session.id)?.agent === agent;
}

/**
 * Before a step: the engine may land a finished compression here, say what the memory
 * sections show and which memory tools the agent carries from this request on, defer its
 * landing to the step's request (0.2), and name input messages the step must not take in (an
 * automatic continuation whose hand-off turn did not land compressed).
 */
export async function preStep(tm, { agent, turn, step, signal }, next) {
  // an engine still booting may hold the previous turn's landing: worth a bounded wait only
  // when the engine makes each turn's first request wait for it (else it lands later)
  if (tm.handshake.bootWait && turn > 1 && step === 1 && tracks(tm, agent)) await tm.whenStarted();
  const tracked = tracks(tm, agent);
  if (tracked) tm.publicTools.setContexts(agent, {});
  let withhold = [];
  if (tm.bridge.ready && tracked && !signal.aborted) {
    try {
      const answer = await tm.callEngine('turn.preStep', {
        sessionId: agent.session.id, logLength: agent.session.seq, turn, step, agentOptions: routeOf(agent),
      }, { timeoutMs: tm.handshake.preStepTimeoutMs, signal, liveness: tm.liveness() });
      tm.publicTools.setContexts(agent, answer?.contexts);
      tm.publicTools.carry(agent, answer?.tools); // into this step's request, with the landing it follows
      if (answer?.landAtRequest) tm.atRequest.set(agent, `${turn}:${step}`);
      withhold = answer?.withhold ?? [];
      if (answer?.notice) {
        // once per cause (the engine says it once): DSH keeps plugin logs in memory only
        tm.ctx.logger.warn(answer.notice);
        process.stderr.write(`${answer.notice}\n`);
      }
    } catch (error) {
      tm.ctx.logger.warn(`turn-memory pre-step skipped: ${error.message}`);
    }
  }
  const decision = await next();
  if (!withhold.length || decision?.kind !== 'enter') return rememberInput(tm, agent, turn, step, decision);
  // A first step left with host context only (the runtime-context snapshot) takes nothing,
  // so the loop ends the turn before any request
  const kept = decision.messages.filter((message) => !withhold.includes(message.id));
  const empty = step === 1 && kept.every((message) => isSnapshot(tm.workers.snapshotSources, message));
  return rememberInput(tm, agent, turn, step, { ...decision, messages: empty ? [] : kept });
}

/** Keep the input of a step whose request the engine will be called from (0.2). */
function rememberInput(tm, agent, turn, step, decision) {
  if (decision?.kind === 'enter' && tm.atRequest.get(agent) === `${turn}:${step}`) {
    tm.stepInput.set(agent, decision.messages);
  }
  return decision;
}

/**
 * 0.2: the step's step/start is committed, its prompt and user batch are not yet: a landing
 * the pre-step deferred happens here, inside the loop's own step.
 */
export async function request(tm, { agent, turn, step, signal }, next) {
  if (tm.atRequest.get(agent) !== `${turn}:${step}`) return next();
  tm.atRequest.delete(agent);
  const input = tm.stepInput.get(agent);
  tm.stepInput.delete(agent);
  if (tm.bridge.ready && !signal?.aborted) {
    try {
      const answer = await tm.callEngine('turn.request', { sessionId: agent.session.id, logLength: agent.session.seq, turn, step },
        { timeoutMs: tm.handshake.preStepTimeoutMs, signal, liveness: tm.liveness() });
      tm.publicTools.carry(agent, answer?.tools); // the host reads the step's tool list after this hook
      const withhold = answer?.withhold ?? [];
      if (withhold.length) withholdInStep(tm, agent, input, withhold);
    } catch (error) {
      tm.ctx.logger.warn(`turn-memory request landing skipped: ${error.message}`);
    }
  }
  return next();
}

/**
 * The landing this step's request was to carry was refused: never take in the automatic
 * continuation that needed it. The loop appends the step's input after agent/request, from
 * the array the pre-step answered: drop those messages from it; with nothing but host context
 * left (or the input unknown), cancel the step so no request runs on the raw turn (the turn
 * ends aborted; queued input stays queued).
 */
function withholdInStep(tm, agent, input, withhold) {
  if (Array.isArray(input)) {
    for (let i = input.length - 1; i >= 0; i -= 1) if (withhold.includes(input[i]?.id)) input.splice(i, 1);
    if (!input.every((message) => isSnapshot(tm.workers.snapshotSources, message))) return;
  }
  // an AgentCancelCause of kind 'hook' (0.2's loop records it as the turn's end reason)
  agent.cancel({ kind: 'hook', reason: 'turn-memory: the automatic continuation is withheld (its hand-off turn did not land compressed)' },
    { keepInbox: true });
}

/** A request the provider refused as too long: the engine compacts once per turn and says whether to replay it. */
export async function requestError(tm, { agent, turn, failure, signal }, next) {
  if (failure?.code !== CONTEXT_WINDOW_EXCEEDED_CODE || signal?.aborted || !tm.bridge.ready || !tracks(tm, agent)) return next();
  try {
    const answer = await tm.callEngine('compact.overflow', {
      sessionId: agent.session.id, logLength: agent.session.seq, turn, agentOptions: routeOf(agent),
    }, { timeoutMs: tm.settings.manualTimeoutMs, signal, liveness: tm.liveness() });
    if (answer?.retry) return { kind: 'retry' };
  } catch (error) {
    tm.ctx.logger.warn(`turn-memory overflow recovery skipped: ${error.message}`);
  }
  return next();
}

/** Every committed event is mirrored (never appended to or awaited here). */
export function sessionEvent(tm, session, event) {
  tm.mirror.onEvent(session, event);
  // what a pre-step answered is for that turn: once it ends, its sections show nothing
  // (the next turn's first context is assembled before that turn's own pre-step)
  if (event.type === 'turn/end') {
    const agent = tm.mirror.entry(session.id)?.agent;
    if (agent) tm.publicTools.setContexts(agent, {});
  }
}

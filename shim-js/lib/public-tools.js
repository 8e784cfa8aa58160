// Puts the engine's public memory tools and named runtime-context sections on user agents.
// The engine names them in the handshake, answers every call and says, at each pre-step,
// what each section shows ('' shows nothing). rc8 assembles a step's context before its
// pre-step hook runs, so an answer shows from the following step's request on.
//
// Registered is not shown. Every declared tool is registered on the agent at once (from the
// declarations cache of the last handshake, so a call can be answered from the first request
// on), but a request shows one only once the engine names it (`carry`: a pre-step's or a
// request's answer), and then in every request after it: a session with nothing to read back
// pays nothing for the declarations (docs/decisions.md#the-memory-tools-join-the-request-that-first-needs-them).
// Both hosts assemble a step's tool list before its pre-step (a tool registered in a pre-step
// reaches the next step's request only) and read that list when they build the step's model
// request, after `agent/request`: the agent's own `system-prompt/assemble` waterfall keeps our
// tools out of the list it returns, and `carry` puts them back into that same array, in the
// host's own order, so the request that carries the first compressed turn (one cache break)
// also carries the tools. A resumed session starts with the tools its last request carried
// (its logged request header), whether or not the engine is up yet.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

import { engineTool } from './engine-tools.js';

const CONTEXT_ORDER = 200;

export class PublicTools {
  specs = [];
  sections = [];
  /** agent -> { tools: Map, sections: Set, texts: Map, carried: Set, step, assembling } */
  #agents = new WeakMap();

  constructor(ctx, callEngine, cacheFile = declarationsCache()) {
    this.ctx = ctx;
    this.callEngine = callEngine;
    this.cacheFile = cacheFile;
    const cached = readJson(cacheFile);
    this.specs = Array.isArray(cached?.publicTools) ? cached.publicTools : [];
    this.sections = Array.isArray(cached?.contextSections) ? cached.contextSections : [];
  }

  /** After a handshake: what to register, then bring the agents already tracked up to date. */
  configure({ publicTools = [], contextSections = [] }, agents) {
    this.specs = publicTools;
    this.sections = contextSections;
    writeJson(this.cacheFile, { publicTools, contextSections });
    for (const agent of agents) this.attach(agent);
  }

  /** Register what this agent lacks, replace what changed (registrations unwind with the agent). */
  attach(agent) {
    let state = this.#agents.get(agent);
    if (!state) {
      state = { tools: new Map(), sections: new Set(), texts: new Map(), carried: loggedTools(agent), step: null };
      this.#agents.set(agent, state);
      state.assembling = hideUncarried(agent, state);
    }
    const wanted = new Map(this.specs.map((spec) => [spec.name, JSON.stringify(spec)]));
    for (const [name, { json, dispose }] of state.tools) {
      if (wanted.get(name) === json) continue;
      dispose();
      state.tools.delete(name);
    }
    for (const spec of this.specs) {
      if (state.tools.has(spec.name)) continue;
      const dispose = agent.ctx.tools.register(engineTool(this.ctx, spec, (args, exec) => this.callEngine('tool.call', {
        sessionId: agent.session.id, tool: spec.name, args, callId: exec.callId, agentOptions: routeOf(agent),
      })));
      state.tools.set(spec.name, { json: wanted.get(spec.name), dispose });
    }
    for (const name of this.sections) {
      if (state.sections.has(name)) continue;
      // rc8 requires a finite order (contexts are joined by it): after the host's own (110, 115)
      agent.ctx.systemPrompt.context({ name, order: CONTEXT_ORDER, text: () => state.texts.get(name) ?? '' });
      state.sections.add(name); // only once registered: a refused registration is retried on the next attach
    }
  }

  /**
   * The engine names the tools this agent carries from now on (never fewer than before): they
   * join the tool list of the step being prepared, unless its request was already built.
   */
  carry(agent, names) {
    const state = this.#agents.get(agent);
    if (!state || !Array.isArray(names) || names.every((name) => state.carried.has(name))) return;
    for (const name of names) state.carried.add(name);
    const step = state.step;
    if (!step || Object.isFrozen(step.shown)) return; // the host froze it with the request: the next step shows them
    step.shown.splice(0, step.shown.length, ...step.full.filter((tool) => shows(state, tool)));
  }

  /** What the engine's pre-step answer says for this step; a missed answer shows nothing. */
  setContexts(agent, contexts) {
    const state = this.#agents.get(agent);
    if (state) state.texts = new Map(Object.entries(contexts ?? {}));
  }
}

/** Whether a tool of the assembled list is in this agent's requests: anything not ours, and ours once carried. */
function shows(state, tool) {
  return !state.tools.has(tool?.name) || state.carried.has(tool.name);
}

/**
 * The agent's own assembly waterfall: its tool list without our tools not carried yet. The
 * list it returns is the array the loop builds this step's request from; it is kept (with
 * the whole list the host assembled) for `carry`. Without the hook every tool shows.
 */
function hideUncarried(agent, state) {
  try {
    return agent.ctx.on('system-prompt/assemble', async (assembly, context, next) => {
      const assembled = await next();
      if ((context?.agent && context.agent !== agent) || !Array.isArray(assembled?.tools)) return assembled;
      const full = assembled.tools;
      if (full.every((tool) => shows(state, tool))) {
        state.step = null;
        return assembled;
      }
      const shown = full.filter((tool) => shows(state, tool));
      state.step = { full, shown };
      return { ...assembled, tools: shown };
    });
  } catch {
    return undefined; // a host without the hook: every registered tool shows, as it did before
  }
}

/** The tool names of the session's logged request header: what its last request carried (a resumed session keeps them). */
function loggedTools(agent) {
  try {
    const header = agent.session?.requestHeader?.();
    return new Set((header?.tools ?? []).map((tool) => tool?.name).filter(Boolean));
  } catch {
    return new Set();
  }
}

function declarationsCache() {
  return join(process.env.DSH_HOME || join(homedir(), '.dsh'), 'turn-memory', 'declared.json');
}

function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined; // no cache yet, or unreadable: the handshake declares everything
  }
}

/** Whole file or none (another DSH may read it now); a failure only loses the early registration. */
export function writeJson(file, value) {
  const text = JSON.stringify(value);
  try {
    if (readFileSync(file, 'utf8') === text) return;
  } catch { /* not there yet */ }
  const tmp = `${file}.${process.pid}`;
  try {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(tmp, text);
    renameSync(tmp, file); // Windows refuses it while another process holds the file without share-delete
  } catch {
    try {
      rmSync(tmp, { force: true }); // leave no temporary file behind
    } catch { /* held open too: nothing more to do */ }
  }
}

export function routeOf(agent) {
  const { provider, model } = agent.options ?? {};
  return { ...(provider ? { provider } : {}), ...(model ? { model } : {}) };
}

// Puts the engine's public memory tools and named runtime-context sections on user agents.
// The engine names them in the handshake, answers every call and says, at each pre-step,
// what each section shows ('' shows nothing). rc8 assembles a step's context before its
// pre-step hook runs, so an answer shows from the following step's request on.
//
// A step's tool list is also assembled before its pre-step, so tools registered only after
// the handshake would be missing from the first requests of every DSH start (the engine
// boots in ~1 s). The last handshake's declarations are therefore kept in a small cache in
// the DSH home and registered at once; each handshake re-registers whatever changed.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

import { engineTool } from './engine-tools.js';

const CONTEXT_ORDER = 200;

export class PublicTools {
  specs = [];
  sections = [];
  /** agent -> { tools: Set, sections: Set, texts: Map } */
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
    if (!state) this.#agents.set(agent, (state = { tools: new Map(), sections: new Set(), texts: new Map() }));
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

  /** What the engine's pre-step answer says for this step; a missed answer shows nothing. */
  setContexts(agent, contexts) {
    const state = this.#agents.get(agent);
    if (state) state.texts = new Map(Object.entries(contexts ?? {}));
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

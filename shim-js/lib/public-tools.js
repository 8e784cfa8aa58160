// Puts the engine's public memory tools and named runtime-context sections on user agents.
// The engine names them in the handshake, answers every call and says, at each pre-step,
// what each section shows ('' shows nothing). rc8 assembles a step's context before its
// pre-step hook runs, so an answer shows from the following step's request on.
import { engineTool } from './engine-tools.js';

const CONTEXT_ORDER = 200;

export class PublicTools {
  specs = [];
  sections = [];
  /** agent -> { tools: Set, sections: Set, texts: Map } */
  #agents = new WeakMap();

  constructor(ctx, callEngine) {
    this.ctx = ctx;
    this.callEngine = callEngine;
  }

  /** After a handshake: what to register, then register it on the agents already tracked. */
  configure({ publicTools = [], contextSections = [] }, agents) {
    this.specs = publicTools;
    this.sections = contextSections;
    for (const agent of agents) this.attach(agent);
  }

  /** Register what this agent does not have yet (registrations unwind with the agent). */
  attach(agent) {
    let state = this.#agents.get(agent);
    if (!state) this.#agents.set(agent, (state = { tools: new Set(), sections: new Set(), texts: new Map() }));
    for (const spec of this.specs) {
      if (state.tools.has(spec.name)) continue;
      state.tools.add(spec.name);
      agent.ctx.tools.register(engineTool(this.ctx, spec, (args, exec) => this.callEngine('tool.call', {
        sessionId: agent.session.id, tool: spec.name, args, callId: exec.callId, agentOptions: routeOf(agent),
      })));
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

export function routeOf(agent) {
  const { provider, model } = agent.options ?? {};
  return { ...(provider ? { provider } : {}), ...(model ? { model } : {}) };
}

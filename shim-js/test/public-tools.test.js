// The memory tools on a user agent (lib/public-tools.js): registered at once, shown in a
// request only once the engine names them, from the step being prepared on; and the
// declarations cache: written whole or not at all, and a write the OS refuses (Windows:
// another process holds the file without share-delete) leaves nothing behind and throws
// nothing into DSH.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { PublicTools, writeJson } from '../lib/public-tools.js';

const SPECS = ['read_session_history', 'read_memory_image', 'continue_after_turn_compression'].map((name) => ({
  name, description: `${name} tool`, parameters: { type: 'object', properties: {} },
}));

/** A user agent whose host assembles `hostTools` (sorted by name, as both hosts do) plus what is registered. */
function fakeAgent(hostTools = ['bash', 'str_replace_editor'], header = undefined) {
  const registered = new Map();
  let waterfall;
  const agent = {
    session: { id: 's1', requestHeader: () => header },
    options: {},
    ctx: {
      tools: { register(tool) { registered.set(tool.name, tool); return () => registered.delete(tool.name); } },
      systemPrompt: { context() {} },
      on(name, handler) { assert.equal(name, 'system-prompt/assemble'); waterfall = handler; return () => {}; },
    },
  };
  /** One step's assembly, as the loop receives it from the waterfall. */
  agent.assemble = async (context = { agent }) => {
    const names = [...hostTools, ...registered.keys()].sort();
    const tools = names.map((name) => ({ name, description: '', parameters: {} }));
    return waterfall({ tools, sections: [] }, context, async () => ({ tools, sections: [] }));
  };
  return agent;
}

function publicTools(t) {
  const dir = mkdtempSync(join(tmpdir(), 'tm-declared-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tools = new PublicTools({}, async () => ({}), join(dir, 'declared.json'));
  tools.configure({ publicTools: SPECS, contextSections: [] }, []);
  return tools;
}

const names = (assembly) => assembly.tools.map((tool) => tool.name);

describe('memory tools on an agent', () => {
  test('registered at once, but kept out of every request until the engine names them', async (t) => {
    const tools = publicTools(t);
    const agent = fakeAgent();
    tools.attach(agent);
    assert.deepEqual(names(await agent.assemble()), ['bash', 'str_replace_editor']);
    tools.carry(agent, []); // nothing to read back yet
    assert.deepEqual(names(await agent.assemble()), ['bash', 'str_replace_editor']);
  });

  test('named in a pre-step: the step already assembled carries them, in the host order, and so does every later one', async (t) => {
    const tools = publicTools(t);
    const agent = fakeAgent();
    tools.attach(agent);
    const step = await agent.assemble();
    tools.carry(agent, SPECS.map((spec) => spec.name));
    const all = ['bash', 'continue_after_turn_compression', 'read_memory_image', 'read_session_history', 'str_replace_editor'];
    assert.deepEqual(names(step), all); // the very array the loop builds this step's request from
    assert.deepEqual(names(await agent.assemble()), all);
    tools.carry(agent, []); // never fewer again: a shrinking list would break the cached prefix once more
    assert.deepEqual(names(await agent.assemble()), all);
  });

  test('a step whose request was built (the host froze its list) is left alone: the next step carries them', async (t) => {
    const tools = publicTools(t);
    const agent = fakeAgent();
    tools.attach(agent);
    const step = await agent.assemble();
    Object.freeze(step.tools);
    tools.carry(agent, ['read_session_history']);
    assert.deepEqual(names(step), ['bash', 'str_replace_editor']);
    assert.deepEqual(names(await agent.assemble()), ['bash', 'read_session_history', 'str_replace_editor']);
  });

  test('a resumed session starts with the memory tools its last logged request carried', async (t) => {
    const tools = publicTools(t);
    const agent = fakeAgent(['bash'], { tools: [{ name: 'bash' }, { name: 'read_session_history' }] });
    tools.attach(agent);
    assert.deepEqual(names(await agent.assemble()), ['bash', 'read_session_history']);
  });

  test("another agent's assembly (a worker forked from this one) is not touched", async (t) => {
    const tools = publicTools(t);
    const agent = fakeAgent();
    tools.attach(agent);
    const worker = {};
    const assembly = await agent.assemble({ agent: worker });
    assert.equal(names(assembly).length, 5);
  });
});

describe('declarations cache', () => {
  test('is written whole, and not rewritten when it already says the same', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-declared-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'turn-memory', 'declared.json');
    writeJson(file, { publicTools: [{ name: 'read_session_history' }] });
    assert.equal(readFileSync(file, 'utf8'), '{"publicTools":[{"name":"read_session_history"}]}');
    writeJson(file, { publicTools: [{ name: 'read_session_history' }] });
    assert.deepEqual(readdirSync(join(dir, 'turn-memory')), ['declared.json']);
  });

  test('a replace the OS refuses leaves no temporary file and throws nothing', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-declared-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'declared.json');
    mkdirSync(file); // a rename over a directory fails on every OS
    writeJson(file, { publicTools: [] });
    assert.deepEqual(readdirSync(dir), ['declared.json']);
  });
});

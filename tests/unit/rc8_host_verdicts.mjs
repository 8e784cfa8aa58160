// Verdicts of the real DSH 0.1.0-rc.8 session validator for a batch of cases.
// usage: node rc8_host_verdicts.mjs <path of @deepseek-ai/dsh-session/lib/index.js>  < cases.json
// Each case is {mode: "seed", seed} (validate a whole stored log),
// {mode: "append", seed, plan} (load seed, session.append each plan event, then reload the result)
// or {mode: "balance", seed} (dsh-compaction's tool-pairing balance around every surface node).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const sessionLib = process.argv[2];
const { Session, KNOWN_SESSION_EVENT_TYPES } = await import(pathToFileURL(sessionLib).href);
const compactionLib = join(dirname(dirname(dirname(sessionLib))), "dsh-compaction", "lib", "index.js");
const { toolPairingBalancedBefore, toolPairingBalancedAfter } = await import(pathToFileURL(compactionLib).href);
const cases = JSON.parse(readFileSync(0, "utf8"));
const text = (error) => (error instanceof Error ? error.message : String(error));

// The load path: Session.create validates envelopes, message shapes and the surface fold of a
// seed; the persistence layer additionally refuses types this build does not know.
function reload(id, events) {
  Session.create(id, events);
  const unknown = events.find((e) => !KNOWN_SESSION_EVENT_TYPES.has(e.type) && e.ignorable !== true);
  if (unknown !== undefined) throw new Error(`event type "${unknown.type}" (seq ${unknown.seq}) is unknown`);
}

function runSeed(c, i) {
  try {
    reload(`seed-${i}`, c.seed);
    return { ok: true };
  } catch (error) {
    return { ok: false, error: text(error) };
  }
}

function runAppend(c, i) {
  let session;
  try {
    session = Session.create(`append-${i}`, c.seed);
  } catch (error) {
    return { setupError: `seed rejected: ${text(error)}` };
  }
  const first = session.seq;
  for (const [index, event] of c.plan.entries()) {
    // the shim's call: type, data and the surface intent, nothing else of the planned event
    const intent = {};
    if ("surfaceOp" in event) intent.surfaceOp = event.surfaceOp;
    if ("sourceEventSeqs" in event) intent.sourceEventSeqs = event.sourceEventSeqs;
    try {
      const committed = session.append(event.type, event.data, intent);
      if (committed.seq !== event.seq) return { setupError: `planned seq ${event.seq} landed at ${committed.seq}` };
    } catch (error) {
      return { appendOk: false, failedAt: index, error: text(error), committed: session.events.slice(first) };
    }
  }
  const committed = session.events.slice(first);
  try {
    reload(`reload-${i}`, [...session.events]);
    return { appendOk: true, reloadOk: true, committed };
  } catch (error) {
    return { appendOk: true, reloadOk: false, error: text(error), committed };
  }
}

function runBalance(c, i) {
  const session = Session.create(`balance-${i}`, c.seed);
  try {
    const nodes = [...session.surface.nodes];
    return { nodes, cuts: nodes.map((seq) => [toolPairingBalancedBefore(session, seq), toolPairingBalancedAfter(session, seq)]) };
  } catch (error) {
    return { error: text(error) };
  }
}

const runners = { seed: runSeed, append: runAppend, balance: runBalance };
const results = cases.map((c, i) => runners[c.mode](c, i));
process.stdout.write(JSON.stringify(results));

// Verdicts of the real DSH 0.2.1-rc.2 session code for a batch of cases.
// usage: node v021_host_verdicts.mjs <node_modules holding @deepseek-ai/*>  < cases.json
//
// "Reload" is what the host does when it opens a persisted session, composed from the host's
// own functions (dsh-session-persistence-jsonl/lib/index.js): the write path encodes every
// event as a JSONL row (eventLine -> format v4 encodeEvent -> assertV4RowAdmission, where a
// retired `kind: 'plugin'` source fails "at the next write"), the read path scans the rows
// strictly (SessionLogScanner: per-row v4 admission and decoding, then the v4 lifecycle
// relationships), validateStoredEvents (known types, adoptSessionEvent), and finally
// Session.fromRestore with the host's message projections. The scanner and the row encoder
// are module-private, so a load hook re-exports them; no host file is modified.
//
// Each case is
//   {mode: "seed", seed}                       persist and reload a whole log;
//   {mode: "append", seed, live?, plan, after?} Session.create(seed), session.append each
//       `live` event (setup, e.g. the next turn's turn/start), then each `plan` event as the
//       shim does (type, data, surface intent only), then each `after` event (what the loop
//       appends next), then persist and reload everything committed;
//   {mode: "constants"}                        the host's own vocabularies.
import { readFileSync } from "node:fs";
import { registerHooks } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = join(process.argv[2], "@deepseek-ai");
const lib = (pkg, file = "lib/index.js") => pathToFileURL(join(root, pkg, file)).href;
const PERSISTENCE = lib("dsh-session-persistence-jsonl");
registerHooks({
  load(url, context, next) {
    const result = next(url, context);
    if (url === PERSISTENCE) {
      result.source = `${result.source}\nexport { SessionLogScanner, eventLine, toHeaderLine };\n`;
    }
    return result;
  },
});
const { Session, KNOWN_SESSION_EVENT_TYPES } = await import(lib("dsh-session"));
const { SessionLogScanner, eventLine, toHeaderLine } = await import(PERSISTENCE);
const { validateStoredEvents } = await import(lib("dsh-session-persistence"));
const { currentSessionMessageProjections } = await import(lib("dsh-session-format-catalog", "lib/types/message-projections.js"));
const { toolPairingBalancedBefore, toolPairingBalancedAfter } = await import(lib("dsh-compaction"));

const text = (error) => (error instanceof Error ? error.message : String(error));
const meta = (id) => ({ version: 4, id, createdAt: 1796000000000, cwd: "/work/ws", isSeeded: false, delegationDepth: 0 });

/** Persist `events` as the JSONL backend writes them; throws where a write would. */
function write(id, events) {
  const rows = [JSON.stringify(toHeaderLine(meta(id)))];
  for (const event of events) {
    try {
      rows.push(eventLine(event));
    } catch (error) {
      throw Object.assign(new Error(text(error)), { stage: "write", seq: event.seq });
    }
  }
  return Buffer.from(rows.join("\n") + "\n");
}

/** Open persisted bytes as the JSONL backend and the session store do. */
function read(id, bytes) {
  const headerEnd = bytes.indexOf(10);
  const stage = (name, fn) => {
    try {
      return fn();
    } catch (error) {
      throw Object.assign(new Error(text(error)), { stage: name });
    }
  };
  const parsed = stage("scan", () => {
    const scanner = new SessionLogScanner(bytes.subarray(0, headerEnd + 1), "strict");
    scanner.write(bytes.subarray(headerEnd + 1));
    return scanner.finish();
  });
  stage("validate", () => validateStoredEvents(parsed.meta, parsed.events, { kind: "jsonl", path: `/mem/${id}` }));
  return stage("restore", () =>
    Session.fromRestore(parsed.meta.id, parsed.events, parsed.meta, parsed.inheritedEventCount, "detached", currentSessionMessageProjections),
  );
}

function reload(id, events) {
  const session = read(id, write(id, events));
  const nodes = [...session.surface.nodes];
  return { nodes, messages: session.deriveMessages().length };
}

const failure = (error) => ({ stage: error.stage ?? "unknown", error: text(error), ...(error.seq === undefined ? {} : { seq: error.seq }) });

function runSeed(c, i) {
  try {
    return { ok: true, ...reload(`seed-${i}`, c.seed) };
  } catch (error) {
    return { ok: false, ...failure(error) };
  }
}

function appendOne(session, event) {
  // the shim's call: type, data and the surface intent, nothing else of the planned event
  const intent = {};
  if ("surfaceOp" in event) intent.surfaceOp = event.surfaceOp;
  if ("sourceEventSeqs" in event) intent.sourceEventSeqs = event.sourceEventSeqs;
  return session.append(event.type, event.data, intent);
}

function runAppend(c, i) {
  let session;
  try {
    session = Session.create(`append-${i}`, c.seed);
    for (const event of c.live ?? []) appendOne(session, event);
  } catch (error) {
    return { setupError: `seed rejected: ${text(error)}` };
  }
  const first = session.seq;
  for (const [index, event] of c.plan.entries()) {
    try {
      const committed = appendOne(session, event);
      if (committed.seq !== event.seq) return { setupError: `planned seq ${event.seq} landed at ${committed.seq}` };
    } catch (error) {
      return { appendOk: false, failedAt: index, error: text(error), committed: session.snapshotEvents(first) };
    }
  }
  const planEnd = session.seq;
  for (const event of c.after ?? []) {
    try {
      appendOne(session, event);
    } catch (error) {
      return { setupError: `after event ${event.type} refused: ${text(error)}` };
    }
  }
  const committed = session.snapshotEvents(first, planEnd);
  try {
    return { appendOk: true, reloadOk: true, committed, ...reload(`reload-${i}`, [...session.snapshotEvents()]) };
  } catch (error) {
    return { appendOk: true, reloadOk: false, committed, ...failure(error) };
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

const runners = {
  seed: runSeed,
  append: runAppend,
  balance: runBalance,
  constants: () => ({ knownEventTypes: [...KNOWN_SESSION_EVENT_TYPES].sort() }),
};
const cases = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(cases.map((c, i) => runners[c.mode](c, i))));

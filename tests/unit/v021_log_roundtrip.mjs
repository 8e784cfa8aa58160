// A session written to disk and read back by the real DSH 0.2.1-rc.2 session code.
// usage: node v021_log_roundtrip.mjs <node_modules holding @deepseek-ai/*> < cases.json
//
// Each case is {id, root, compression: "zstd"|"none", batches: [[event, ...], ...]}, `root` the
// sessions directory of a DSH home (one per compression, as a real home has one). The events go
// through a live Session (Session.create, then session.append of type, data and surface intent,
// as the agent loop and the shim append), so the host assigns seqs and times and checks each
// one. Each batch is then handed to the real JSONL backend (dsh-session-persistence-jsonl, on
// a cordis context, as DSH mounts it) as one durable append: one zstd frame per batch, every
// event encoded by the format v4 codec, which packs 3+ consecutive `sourceEventSeqs` into
// [start, end] pairs. Reading back is the backend's own open + read (frame scan, v4 row
// admission and decoding, validateStoredEvents) and Session.fromRestore with the host's message
// projections: the events, surface and messages DSH resumes the session with.
//
// Per case it prints {ok: true, path, header, events, nodes, messages} or {ok: false, stage, error}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = join(process.argv[2], "@deepseek-ai");
const lib = (pkg, file = "lib/index.js") => pathToFileURL(join(root, pkg, file)).href;
const { Context } = await import(lib("cordis"));
const jsonl = await import(lib("dsh-session-persistence-jsonl"));
const { Session } = await import(lib("dsh-session"));
const { currentSessionMessageProjections } = await import(lib("dsh-session-format-catalog", "lib/types/message-projections.js"));

const text = (error) => (error instanceof Error ? error.message : String(error));
const CREATED = 1796000000000;

async function backend(sessionsRoot, compression) {
  const ctx = new Context();
  await ctx.plugin(jsonl, { root: sessionsRoot, compression });
  return ctx.get("sessionPersistence");
}

function appendOne(session, event) {
  const intent = {};
  if ("surfaceOp" in event) intent.surfaceOp = event.surfaceOp;
  if ("sourceEventSeqs" in event) intent.sourceEventSeqs = event.sourceEventSeqs;
  return session.append(event.type, event.data, intent);
}

async function runCase(c, persistence) {
  const header = { version: 4, id: c.id, createdAt: CREATED, cwd: "/work/ws", isSeeded: false, delegationDepth: 0 };
  let stage = "append";
  try {
    const live = Session.create(c.id, undefined, header, 0, currentSessionMessageProjections); // no seed: no end-seed marker
    stage = "write";
    const handle = await persistence.create(header);
    for (const batch of c.batches) {
      const first = live.seq;
      stage = "append";
      for (const event of batch) appendOne(live, event);
      stage = "write";
      await handle.append(live.snapshotEvents(first));
    }
    await handle.close();
    stage = "read";
    const reader = await persistence.open(c.id, "read");
    const { events } = await reader.read();
    const path = persistence.locate(header).path;
    await reader.close();
    stage = "restore";
    const session = Session.fromRestore(c.id, events, header, 0, "detached", currentSessionMessageProjections);
    return { ok: true, path, events, nodes: [...session.surface.nodes], messages: session.deriveMessages() };
  } catch (error) {
    return { ok: false, stage, error: text(error) };
  }
}

const cases = JSON.parse(readFileSync(0, "utf8"));
const backends = {};
const results = [];
for (const c of cases) {
  const key = `${c.compression}:${c.root}`;
  backends[key] ??= await backend(c.root, c.compression);
  results.push(await runCase(c, backends[key]));
}
process.stdout.write(JSON.stringify(results));
process.exit(0); // the backends hold timers and leases: the results are out

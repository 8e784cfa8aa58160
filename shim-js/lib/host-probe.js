// What this host's session code accepts, tried on a throwaway in-memory session (never
// persisted, never seen by any agent). The engine's dialect layer decides from these facts;
// the shim only reports them.
import { SESSION_FORMAT_VERSION, Session } from '@deepseek-ai/dsh-session';
import { compactCheckpointSource } from '@deepseek-ai/dsh-compaction';

const REPLACE_SHAPES = {
  'startSeq/endSeq': (seq) => ({ op: 'replace', startSeq: seq, endSeq: seq }),
  'start/end': (seq) => ({ op: 'replace', start: seq, end: seq }),
};

function userMessage(text) {
  return { id: `turn-memory-probe-${text}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } };
}

/** Which positional replace-op keys a real session accepts (normally exactly one). */
function replaceKeys() {
  const accepted = [];
  for (const [keys, op] of Object.entries(REPLACE_SHAPES)) {
    try {
      const session = Session.create('turn-memory-probe', []);
      const first = session.append('user/message', userMessage('a'), { surfaceOp: 'append' });
      session.append('user/message', userMessage('b'), { surfaceOp: op(first.seq), sourceEventSeqs: [first.seq] });
      accepted.push(keys);
    } catch {
      // refused: not this host's shape
    }
  }
  return accepted;
}

export function probeHost() {
  let replace;
  try {
    replace = replaceKeys();
  } catch (error) {
    replace = { error: String(error?.message ?? error) };
  }
  return {
    sessionFormatVersion: SESSION_FORMAT_VERSION,
    replaceKeys: replace,
    checkpointSource: { ...compactCheckpointSource('probe') },
  };
}

// The shim's own Bridge, on Windows' Node under Wine, against a Linux engine over tcp.
//   node bridge_round_trip.mjs <endpoint>   (TURN_MEMORY_SECRET in the environment)
// Prints one JSON line: the handshake, ping timings, a non-ASCII echo, the error replies.
import { Bridge } from '../../shim-js/lib/bridge.js';

const [endpoint] = process.argv.slice(2);
const secret = process.env.TURN_MEMORY_SECRET;
const hello = {
  dshVersion: '0.2.0-rc.2', dialect: 'rc8', pid: process.pid, secret, config: {},
  checkpointSource: { kind: 'plugin', plugin: 'compact', compactionId: 'probe' },
};
const hooks = { onCall: async () => ({ result: null }), beforeSend: () => {}, onLost: () => {} };

const bridge = new Bridge(hooks);
const { result } = await bridge.open(endpoint, hello, 20000);
const times = [];
for (let i = 0; i < 200; i += 1) {
  const started = process.hrtime.bigint();
  await bridge.call('ping', { echo: String(i) });
  times.push(Number(process.hrtime.bigint() - started) / 1e6);
}
times.sort((a, b) => a - b);
const echo = (await bridge.call('ping', { echo: '张伟的会话 ü 🎉 C:\\Users\\张伟' })).result.echo;
const unknown = await bridge.call('no.such.method', {}).then(() => null, (error) => ({ name: error.name, code: error.code }));
bridge.dispose();

const intruder = new Bridge(hooks);
const refused = await intruder.open(endpoint, { ...hello, secret: 'not-the-secret' }, 5000)
  .then(() => null, (error) => ({ name: error.name, code: error.code }));
intruder.dispose();

console.log(JSON.stringify({
  platform: process.platform, pid: process.pid, dialect: result.dialect, eventLoop: result.eventLoop,
  p50ms: times[100], p99ms: times[198], echo, unknown, refused,
}));

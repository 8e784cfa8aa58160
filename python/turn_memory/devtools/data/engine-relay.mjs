// engine-relay.mjs: for the Windows tests under Wine only, a Windows-side stand-in for
// `turn-memory serve`. Wine's Node cannot start a Linux program (libuv aborts on
// AssignProcessToJobObject), so the Windows DSH's engine.command is [node.exe, this file]: it
// asks the Linux launcher (turn_memory/devtools/engine_launcher.py, on 127.0.0.1:TM_RELAY_PORT)
// to start the real engine with this argv and the shim's TURN_MEMORY_SECRET, prints the
// engine's stdout (its READY line) and stderr, and closes the engine's stdin when its own stdin
// closes (how the shim stops an engine). The shim then connects to the engine over tcp itself.
import net from 'node:net';

const port = Number(process.env.TM_RELAY_PORT);
const sock = net.connect({ host: '127.0.0.1', port }, () => {
  sock.write(`${JSON.stringify({ args: process.argv.slice(2), secret: process.env.TURN_MEMORY_SECRET ?? '' })}\n`);
});
let buffered = '';
sock.setEncoding('utf8');
sock.on('data', (data) => {
  buffered += data;
  for (let at = buffered.indexOf('\n'); at >= 0; at = buffered.indexOf('\n')) {
    const message = JSON.parse(buffered.slice(0, at));
    buffered = buffered.slice(at + 1);
    if ('stdout' in message) process.stdout.write(`${message.stdout}\n`);
    if ('stderr' in message) process.stderr.write(`${message.stderr}\n`);
    if ('exit' in message) { process.exitCode = message.exit ?? 1; sock.end(); }
  }
});
sock.on('error', (error) => {
  process.stderr.write(`engine-relay: no launcher on 127.0.0.1:${port}: ${error.message}\n`);
  process.exit(1);
});
sock.on('close', () => process.exit(process.exitCode ?? 1));
process.stdin.on('end', () => sock.end());
process.stdin.on('error', () => sock.end());
process.stdin.resume();

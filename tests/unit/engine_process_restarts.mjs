// Drives shim-js/lib/engine-process.js (node builtins only) against a fake engine that prints
// READY and dies at once, and prints one JSON line: the restart delays it scheduled.
// argv: <engine-process.js path> <healthy: "ready" | "never">
const [, , modulePath, healthy] = process.argv;
const { EngineProcess } = await import(new URL(`file://${modulePath}`));
const delays = [];
let starts = 0;
const engine = new EngineProcess({
  command: [process.execPath, '-e', "console.log('TURN_MEMORY_READY ipc:///nowhere'); setTimeout(() => process.exit(3), 50)", '--'],
  transport: 'ipc',
  restartDelayMs: 20,
  logger: {
    info() {},
    warn(line) {
      const found = /restarting in (\d+) ms/.exec(line);
      if (found) delays.push(Number(found[1]));
    },
  },
  onReady: () => {
    starts += 1;
    if (healthy === 'ready') engine.healthy?.(); // as the shim does once a handshake succeeded
  },
  onExit: () => {},
});
engine.start();
const deadline = Date.now() + 20000;
while (delays.length < 5 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
engine.stop();
console.log(JSON.stringify({ delays: delays.slice(0, 5), starts }));

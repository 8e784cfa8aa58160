// Defaults of the row's `engine` section, which the shim needs before the engine exists.
// The one source of every key, default and bound is the Python model
// (python/turn_memory/config.py, `ShimConfig`); a unit test keeps this copy equal to it.
export const ENGINE_DEFAULTS = Object.freeze({
  command: Object.freeze(['turn-memory', 'serve']),
  transport: 'auto',
  startTimeoutMs: 20000,
  hookTimeoutMs: 2000,
  manualTimeoutMs: 600000,
  restartDelayMs: 500,
  // consecutive call timeouts after which a live-but-silent engine is restarted
  recycleAfterTimeouts: 3,
  // a long call pings the engine this often; a ping unanswered within twice this means it hung
  livenessMs: 5000,
});

// The row config as the shim uses it. The engine validates every key against its one model
// (python/turn_memory/config.py, `EngineConfig`) and refuses a bad one in its handshake, by
// name; the shim reports that refusal (index.js). All the shim needs before then is an
// `engine` section it can start and reach the engine with, so it never refuses a config: an
// absent key takes its default, and so does a value it cannot run with, so that the engine
// still starts and names that value.
import { ENGINE_DEFAULTS } from './defaults.js';

const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The row config with the engine defaults filled in: what the plugin keeps and the handshake sends. */
export function withDefaults(config) {
  if (config === undefined || config === null) return { engine: { ...ENGINE_DEFAULTS } };
  if (!isObject(config)) return config;
  const engine = config.engine ?? {};
  return isObject(engine) ? { ...config, engine: { ...ENGINE_DEFAULTS, ...engine } } : config;
}

/** A value the shim can run with in place of `fallback`: the same JSON type (times and counts finite, not negative). */
function runnable(value, fallback) {
  if (Array.isArray(fallback)) {
    return Array.isArray(value) && value.length > 0 && value.every((item) => typeof item === typeof fallback[0]);
  }
  if (typeof fallback === 'number') return Number.isFinite(value) && value >= 0;
  return typeof value === typeof fallback;
}

/**
 * The engine section the shim runs with (`settings`) and the keys whose given value it could
 * not run with (`unusable`, e.g. `engine.command`: it ran the default instead).
 */
export function engineSettings(config) {
  const given = isObject(config) ? config.engine ?? {} : {};
  if (!isObject(given)) return { settings: { ...ENGINE_DEFAULTS }, unusable: ['engine'] };
  const settings = { ...ENGINE_DEFAULTS };
  const unusable = [];
  for (const [key, fallback] of Object.entries(ENGINE_DEFAULTS)) {
    if (given[key] === undefined) continue;
    if (runnable(given[key], fallback)) settings[key] = given[key];
    else unusable.push(`engine.${key}`);
  }
  // the one key without a default: where the engine also writes its log ('' or null: nowhere)
  if (typeof given.logFile === 'string') {
    if (given.logFile) settings.logFile = given.logFile;
  } else if (given.logFile !== undefined && given.logFile !== null) {
    unusable.push('engine.logFile');
  }
  return { settings, unusable };
}

// `node --import ./resolve-node-path.mjs`: lets the shim's ES modules find their bare imports
// (`zeromq`, `@deepseek-ai/dsh-*`) in the directories NODE_PATH lists, as CommonJS would.
//
// Why: ESM resolution ignores NODE_PATH; it only walks up from the importing file to the
// node_modules above it. The shim never ships with its dependencies (DSH installs them beside
// the plugin), so in the checkout `shim-js/lib/*.js` finds none. Instead of symlinking a
// node_modules into the checkout or copying the shim elsewhere, a synchronous resolve hook
// (module.registerHooks, Node >= 22.15, in the loading thread) retries a bare specifier that
// normal resolution could not find as if it were imported from inside each NODE_PATH entry.
// Every entry is a node_modules directory, so resolving from a file directly in it looks
// there first (then above it, which is harmless). Relative and absolute imports, and bare
// ones that resolve normally, are untouched.
import { registerHooks } from 'node:module';
import { delimiter, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const dirs = (process.env.NODE_PATH ?? '').split(delimiter).filter(Boolean);
const isBare = (specifier) => !/^(\.{0,2}\/|[a-z][a-z0-9+.-]*:)/i.test(specifier);

registerHooks({
  resolve(specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context);
    } catch (error) {
      if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !isBare(specifier)) throw error;
      for (const dir of dirs) {
        try {
          return nextResolve(specifier, { ...context, parentURL: pathToFileURL(join(dir, 'index.js')).href });
        } catch {
          // not in this entry; try the next one
        }
      }
      throw error;
    }
  },
});

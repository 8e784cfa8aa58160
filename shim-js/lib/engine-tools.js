// A DSH tool whose every call the engine answers. The engine declares the tool as JSON Schema;
// the answer is text, optionally with an image the engine found in the caller's own log,
// which is verified through the attachment service before it goes back as an image block.
import { defineTool } from '@deepseek-ai/dsh-tools';

const IMAGE = {
  type: 'object',
  additionalProperties: false,
  properties: {
    attachmentId: { type: 'string', required: true },
    mediaType: { type: 'string', required: true },
    bytes: { type: 'integer', required: true },
    width: { type: 'integer', required: true },
    height: { type: 'integer', required: true },
    name: { type: 'string' },
  },
};
const OUTPUT = {
  schema: { type: 'object', additionalProperties: false, properties: { text: { type: 'string', required: true }, image: IMAGE } },
  render: (_args, value) => [
    { type: 'text', text: value.text },
    ...(value.image ? [{ type: 'image', attachment: value.image }] : []),
  ],
};

/** JSON Schema (what the engine declares) -> DSH's tool-parameter DSL (a property map). */
function dslNode(schema, required) {
  const node = { type: schema.type };
  for (const key of ['description', 'enum', 'const']) if (schema[key] !== undefined) node[key] = schema[key];
  if (schema.type === 'array' && schema.items) node.items = dslNode(schema.items, false);
  if (schema.type === 'object') {
    node.properties = dslProperties(schema);
    node.additionalProperties = schema.additionalProperties ?? false;
  }
  if (required) node.required = true;
  return node;
}

export function dslProperties(schema) {
  const required = new Set(schema.required ?? []);
  return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, v]) => [k, dslNode(v, required.has(k))]));
}

/**
 * @param ctx - the plugin context (attachment and llm services)
 * @param spec - {name, description, parameters}
 * @param call - (args, exec) => the engine's answer {text, isError, conclude, image}
 * @param onConclude - called before an accepted answer ends the caller's turn
 */
export function engineTool(ctx, spec, call, onConclude) {
  return defineTool({
    name: spec.name,
    description: spec.description,
    parameters: dslProperties(spec.parameters),
    output: OUTPUT,
    execute: async (args, exec) => {
      const answer = await call(args, exec);
      if (answer.isError) throw new Error(answer.text);
      const image = answer.image ? await readImage(ctx, answer.image, exec) : undefined;
      if (answer.conclude) {
        onConclude?.();
        exec.concludeTurn();
      }
      return image ? { text: answer.text, image } : { text: answer.text };
    },
  });
}

/** The same gates as DSH's own read_image: an image-capable route and bytes that still verify. */
async function readImage(ctx, ref, exec) {
  const attachments = ctx.get('attachments');
  if (!attachments) throw new Error('this DSH profile has no attachment service, so the image cannot be read; the memory marker stays as it is');
  const routed = exec.agent?.session.requestHeader?.()?.config;
  const provider = routed?.provider ?? exec.agent?.options?.provider;
  const model = routed?.model ?? exec.agent?.options?.model;
  const llm = ctx.get('llm');
  if (provider === undefined || model === undefined || !llm) throw new Error('cannot return the image: the current model route could not be resolved');
  const info = await llm.resolveModelInfo(provider, model, exec.signal);
  if (!info?.inputModalities?.includes('image')) {
    throw new Error(`cannot return the image: model "${model}" does not accept image input; the memory marker stays as it is — answer from the text memory or switch to an image-capable model`);
  }
  const stored = await attachments.readImage(ref, exec.signal);
  return stored.ref;
}

"""Thought hints (docs/decisions.md#long-thoughts-get-hints): a one-shot small-model index of each long
reasoning block.

`detect` finds the blocks (live stream block-ends, durable assistant messages), `client`
makes the request (DSH's llm service or an OpenAI-compatible endpoint), and `service`
runs one task per block and hands a turn's finished hints to its compression job. Hints
live only in memory: a restart rebuilds them from the durable messages.
"""

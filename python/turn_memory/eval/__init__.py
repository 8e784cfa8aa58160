"""`turn-memory eval`: what the compressed memory keeps, measured against stock compaction.

Each scenario is a recorded coding session (`scenarios/<name>/scenario.yml` plus the
workspace it starts from). It is replayed through a real DSH host twice, once with stock
compaction-basic and once with turn-memory: the user's words and the agent's replies come
from the transcript and its tool calls run for real in a throwaway workspace, while every
request that shapes or judges the memory (turn and session workers, thought hints, stock's
summary, the probe answers and the judge) goes to the provider. Then the probes are asked
against the memory each engine left, and scored.

Modules, each with one job: `scenario` (files -> validated scenarios), `dry_run` (a
scenario's commands without DSH, for `--check`), `routing` (which request is which),
`replay` (the agent's recorded replies), `provider` (an OpenAI-compatible endpoint),
`scripted` (the deterministic stand-in for it), `proxy` (the model server DSH talks to),
`session_run` (one scenario on one engine through DSH), `measure`, `facts` and
`protocol_stats` (deterministic measures), `probes` (answer and judge), `suite` (the order of
the work), `cost`, `report`, `command` (arguments, confirmation, output). User docs:
docs/eval.md.
"""

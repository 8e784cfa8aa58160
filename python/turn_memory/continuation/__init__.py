"""Long-turn continuation: milestone reminders, the continuation tool, follow-ups
(docs/decisions.md#a-long-turn-hands-off-and-continues)."""

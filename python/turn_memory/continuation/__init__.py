"""Long-turn continuation (docs/decisions.md#a-long-turn-hands-off-and-continues): milestone reminders, the
continuation tool, follow-ups."""

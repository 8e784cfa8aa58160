"""Long-turn hand-off (design D-013): milestone reminders, the continuation tool, follow-ups."""

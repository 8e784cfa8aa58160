"""`turn-memory doctor`: is turn-memory installed, live and reachable, and if not, how to fix it."""

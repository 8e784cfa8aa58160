"""`turn-memory inspect`: what turn-memory did to a session, read from DSH's log on disk."""

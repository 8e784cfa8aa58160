"""read_session_history: the public tool that reads a session's original turns back from its append-only log."""

"""Public memory tools the main agent may call (read_session_history, read_memory_image,
continue_after_turn_compression): registered on every user agent by the shim, answered here."""

"""`turn-memory install` / `uninstall`: put the engine into a DSH profile and take it out again."""

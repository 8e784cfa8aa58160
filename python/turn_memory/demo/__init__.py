"""`turn-memory demo`: a real DSH session with turn-memory, start to finish, in a throwaway home."""

"""Host adapters: each speaks to one thing outside the core (the engine, the host, files of state)."""

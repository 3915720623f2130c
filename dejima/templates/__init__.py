"""Templates of the pure core, as Python text (the core reads no file)."""

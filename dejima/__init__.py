"""dejima: an island for coding agents, with one guarded bridge.

Importing dejima has no side effects; the console scripts live in dejima.cli.
"""

__version__ = "0.1.0"

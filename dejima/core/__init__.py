"""The pure core of dejima.

Everything under ``dejima.core`` turns values into values: settings text into a ``Settings``,
a request into a ``SessionPlan``, a plan into an nft ruleset or a Dockerfile. No module here
talks to Docker, opens a socket, starts a process or writes to the terminal; the layering test
(tests/unit/test_layering.py) fails if one starts to. Adapters outside the core do the I/O.
"""

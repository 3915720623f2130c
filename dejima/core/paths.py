"""Names the launcher shares with the containers it starts: where the filter reads its
configuration and keeps its sockets, where the session's command waits to be released.

Kept apart from core/plan.py (and free of imports) so that the launcher's prestart
(orchestration/prestart.py) can make these places before the plan's code is even imported.
"""

IMAGE_REPOSITORY = "dejima"  # the images dejima builds: dejima/filter:<hash>, dejima/session:<hash>

# The host directory mounted into the filter alone: its configuration FIFO, the control socket
# (live grants) and the credential proxy's sockets, out of the session's reach.
FILTER_RUN_DIR = "/run/dejima"
FILTER_CONFIG_ENV = "DEJIMA_FILTER_CONFIG"  # the configuration itself (plans made without a run directory)
FILTER_CONFIG_FIFO_ENV = "DEJIMA_FILTER_CONFIG_FIFO"  # where the filter reads it instead: one JSON line
FILTER_CONFIG_FIFO = "config"

# The start gate (core/plan.py GATE_SCRIPT, adapters/fifo.py): a host directory mounted read-only
# into the session, holding one FIFO the launcher writes the word to.
GATE_DIR, GATE_FIFO, GATE_WORD = "/run/dejima-gate", "go", "go"

# A pod's credential proxy (core/kubernetes.py, proxy/pod.py): its configuration's variable and where
# it keeps its records (a volume of its own).
PROXY_CONFIG_ENV = "DEJIMA_PROXY_CONFIG"
PROXY_RECORDS_DIR = "/run/dejima-proxy"
PROXY_TRUST_DIR = "/run/dejima-trust"  # where it writes the session CA, which the session mounts read-only
SESSION_TRUST_DIR = ".dejima/tls"  # in the session's home: the session CA and the bundle its tools trust
SESSION_HOME = "/home/dejima"  # the session's $HOME (the per-project home directory is mounted there)
BRIDGE_PORT = 700  # the filter relays the session's 127.0.0.1:700 to the credential proxy's socket

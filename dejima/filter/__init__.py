"""Code that runs inside the filter container (stdlib, nftables and dnslib only).

The filter is PID 1 of the session's PID namespace and owns its network namespace: it applies
the ruleset, reads it back, verifies it, reports ready on stdout, and then stays up. When it
exits, for any reason, the kernel kills every process of the session.
"""

READY = "dejima-filter: ready"
FAILED = "dejima-filter: failed:"
VIOLATION = "dejima-violation "  # one JSON record follows on the line

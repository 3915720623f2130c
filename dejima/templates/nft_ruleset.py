"""The nft ruleset a session's filter applies (nft -f syntax), with ``${name}`` slots (string.Template).

Python text rather than a data file, so rendering it reads no file: the core does no I/O.
dejima/core/ruleset.py fills the slots.
"""

RULESET = """\
# dejima egress ruleset, session ${session_id}.
# dejima owns table inet ${table} and replaces it whole, in one transaction:
# the add-then-delete prelude makes the replace work whether or not the table exists.
# The table is written the way `nft -s list table` prints it (protocols as numbers: 6 is TCP,
# 17 UDP), so the filter can check the kernel's listing against this text.
table inet ${table}
delete table inet ${table}

table inet ${table} {
	# Addresses from allowed DNS answers, filled by the filter's resolver with a timeout from the TTL.
	set allow4 {
		type ipv4_addr
		flags timeout
	}

	set allow4_port {
		type ipv4_addr . inet_service
		flags timeout
	}

	# Addresses of revoked grants: their established flows are cut (refused) until they expire.
	set revoked4 {
		type ipv4_addr
		flags timeout
	}

	# The resolvers the filter forwards allowed queries to; only its own marked sockets may use them.
	set upstream4 {
		type ipv4_addr${upstream_elements}
	}

	# Every refusal: recorded (at a bounded rate, so a flood cannot drown the reader), then
	# refused fast instead of left to hang: RST for TCP, ICMP for the rest.
	chain refuse {
		limit rate ${log_rate}/second burst ${log_burst} packets log prefix "dejima-deny " group ${nflog_group}
		meta l4proto 6 reject with tcp reset
		reject with icmpx admin-prohibited
	}

	# Egress is default-deny. What is allowed: loopback inside the namespace (the resolver lives
	# there), the resolver's upstream queries, and TCP to allowed literals and resolved addresses.
	chain output {
		type filter hook output priority filter; policy drop;
		# The engine's embedded resolver (user-defined networks) answers on 127.0.0.11: not ours.
		ip daddr ${engine_resolver} counter goto refuse
		oif "lo" accept
		meta mark ${resolver_mark} ip daddr @upstream4 meta l4proto { 6, 17 } th dport 53 accept${proxy_rules}
		# Only the resolver's marked sockets reach an upstream, even on a flow it opened: a session
		# that sends from a port the resolver used would otherwise ride that flow's conntrack entry.
		ip daddr @upstream4 counter goto refuse${denied_literals}
		ip daddr @revoked4 counter goto refuse
		ct state established,related accept${direct}
		counter goto refuse
	}

	# Ingress: only replies to what egress allowed, and new TCP to the session's published ports
	# (the engine's port binding forwards the host's connections here).
	chain input {
		type filter hook input priority filter; policy drop;
		iif "lo" accept
		ct state established,related accept${published_ports}
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
	}
${relay_chain}}
"""

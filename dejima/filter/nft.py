"""The only module that imports the nftables bindings.

``apply_ruleset`` loads a whole ruleset in one transaction; ``read_table`` returns what the
kernel holds; ``verify_table`` checks its base chains and sets against what the launcher
expects, and ``verify_listing`` checks the kernel's whole listing against the ruleset itself. The bindings report
errors as return codes, which are turned into ``NftError`` here.
"""

from __future__ import annotations

import json
from typing import Any


class NftError(Exception):
    pass


def _nft() -> Any:
    import nftables  # imported here so that unit tests can load this module without the bindings

    handle = nftables.Nftables()
    handle.set_json_output(True)
    handle.set_handle_output(False)
    return handle


def apply_ruleset(text: str, handle: Any = None) -> None:
    handle = handle or _nft()
    rc, _out, err = handle.cmd(text)
    if rc != 0:
        raise NftError(f"nft refused the ruleset (rc={rc}): {err.strip() or 'no message'}")


def read_table(family: str, table: str, handle: Any = None) -> list[dict[str, Any]]:
    """The kernel's view of one table, as libnftables JSON objects."""
    handle = handle or _nft()
    rc, out, err = handle.cmd(f"list table {family} {table}")
    if rc != 0:
        raise NftError(f"cannot read back table {family} {table} (rc={rc}): {err.strip()}")
    objects: list[dict[str, Any]] = json.loads(out)["nftables"]
    return objects


def read_listing(family: str, table: str, handle: Any = None) -> str:
    """The kernel's text listing of one table, without counters or set contents' state."""
    handle = handle or _nft()
    handle.set_json_output(False)
    handle.set_stateless_output(True)
    rc, out, err = handle.cmd(f"list table {family} {table}")
    if rc != 0:
        raise NftError(f"cannot list table {family} {table} (rc={rc}): {err.strip()}")
    return str(out)


def verify_listing(ruleset: str, listing: str) -> None:
    """Raise NftError unless the kernel's listing says exactly what the applied ruleset said."""
    from dejima.core.nftlisting import difference

    problem = difference(ruleset, listing)
    if problem:
        raise NftError(problem)


def verify_table(objects: list[dict[str, Any]], expect: dict[str, Any]) -> None:
    """Raise NftError unless the read-back table has exactly the expected base chains."""
    chains = {
        obj["chain"]["name"]: obj["chain"]
        for obj in objects
        if "chain" in obj and obj["chain"].get("table") == expect["table"]
    }
    wanted = {c["name"]: c for c in expect["chains"]}
    missing = sorted(set(wanted) - set(chains))
    if missing:
        raise NftError(f"read-back is missing chain(s) {', '.join(missing)}")
    for name, want in wanted.items():
        got = chains[name]
        if got.get("hook") != want["hook"] or got.get("policy") != want["policy"]:
            raise NftError(
                f"chain {name}: kernel has hook={got.get('hook')} policy={got.get('policy')}, "
                f"expected hook={want['hook']} policy={want['policy']}"
            )
    extra_base = sorted(n for n, c in chains.items() if "hook" in c and n not in wanted)
    if extra_base:
        raise NftError(f"read-back has unexpected base chain(s) {', '.join(extra_base)}")
    sets = {obj["set"]["name"] for obj in objects if "set" in obj}
    missing_sets = sorted(set(expect.get("sets", ())) - sets)
    if missing_sets:
        raise NftError(f"read-back is missing set(s) {', '.join(missing_sets)}")
    rules = [obj["rule"] for obj in objects if "rule" in obj]
    if not any(rule.get("chain") == "output" for rule in rules):
        raise NftError("read-back output chain has no rules")


class SetWriter:
    """Keeps the allow sets: addresses from allowed answers (with timeouts), live grants of
    addresses, and the ``revoked4`` set that cuts established flows to revoked addresses.

    It remembers when each element it added will expire, so repeated answers cost no kernel
    round trip, and forgets elements once they are past expiry (the memory stays bounded).
    """

    # An element we believe expired this long ago may, by clock skew, still be in the kernel.
    MARGIN_SECONDS = 5.0
    PRUNE_ABOVE = 4096  # remembered elements before a prune of the expired ones
    REVOKED_SECONDS = 3600  # how long a revoked address stays cut (its flows are gone long before)

    def __init__(self, family: str, table: str, handle: Any = None) -> None:
        import threading

        self.family, self.table = family, table
        self.handle = handle or _nft()
        # Held while a batch is built, run and recorded (callers may use threads). Reentrant:
        # add_many prunes.
        self.lock = threading.RLock()
        # set -> element -> when we last let it expire (per set, so an entry costs no key tuple)
        self.expiry: dict[str, dict[str, float]] = {"allow4": {}, "allow4_port": {}}
        # The next size that triggers a prune: twice what the last one left, so a map full of live
        # elements is not copied on every transaction (the cost stays linear in what is added).
        self.prune_above = self.PRUNE_ABOVE
        self.revoked: dict[str, float] = {}  # address -> until when revoked4 holds it

    def _prefix(self, target: str) -> str:
        return f"element {self.family} {self.table} {target}"

    def _run(self, batch: str, what: str) -> None:
        rc, _out, err = self.handle.cmd(batch)
        if rc != 0:
            raise NftError(f"cannot {what} (rc={rc}): {err.strip()}")

    def _forget(self, target: str, elements: list[str]) -> str:
        """A batch that removes ``elements`` from ``target`` whether or not they are still there:
        adding first makes the delete valid for an element that already expired."""
        if not elements:
            return ""
        prefix = self._prefix(target)
        return (f"add {prefix} {{ {', '.join(f'{e} timeout 1s' for e in elements)} }}\n"
                f"delete {prefix} {{ {', '.join(elements)} }}\n")

    @staticmethod
    def _elements(addresses: list[str], ports: list[int] | None) -> tuple[str, list[str]]:
        target = "allow4" if ports is None else "allow4_port"
        return target, addresses if ports is None else [f"{a} . {p}" for a in addresses for p in ports]

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        """Would ``add`` leave the kernel alone (every element still in its set for at least half
        of ``timeout``)? Lets a cached answer skip the set writer without a kernel round trip."""
        import time

        target, elements = self._elements(addresses, ports)
        lasting = float("inf") if timeout is None else timeout
        now = time.monotonic()
        expiry = self.expiry[target]
        return all(expiry.get(e, 0) - now >= lasting / 2 for e in elements)

    def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> None:
        """Allow TCP to ``addresses`` (on ``ports``, or every port when None) for ``timeout``
        seconds (None: until removed).

        A new element is added. One that may still be in the set is added, deleted and added
        again in the same transaction: it exists either way, and its timeout restarts even on
        kernels where a plain re-add keeps the old expiry. One with more than half the new
        timeout left is left alone, so repeated answers cost no kernel round trip.
        """
        self.add_many([(addresses, ports, timeout)])

    def add_many(self, requests: list[tuple[list[str], list[int] | None, int | None]],
                 asked: float = float("inf")) -> None:
        """``add`` for several answers in one kernel transaction: all of them hold, or none
        (NftError). ``asked``: when the earliest of them was asked for (time.monotonic()); an
        address revoked since then is left out, so a late insert cannot undo the revoke."""
        import time

        with self.lock:
            now = time.monotonic()
            batch, done = "", []
            for addresses, ports, timeout in requests:
                addresses = [a for a in addresses if self.revoked.get(a, 0) - self.REVOKED_SECONDS <= asked]
                part, elements, target, lasting = self._add_batch(addresses, ports, timeout, now)
                batch += part
                done.append((addresses, elements, target, lasting))
            if not batch:
                return
            self._run(batch, "add to the allow sets")
            untils: dict[float, float] = {}  # one float per timeout, shared by the batch's elements
            for addresses, elements, target, lasting in done:
                for address in addresses:
                    self.revoked.pop(address, None)
                expiry, until = self.expiry[target], untils.setdefault(lasting, now + lasting)
                for element in elements:
                    expiry[element] = max(expiry.get(element, 0), until)
            if sum(map(len, self.expiry.values())) > self.prune_above:
                self.prune(now)

    def _add_batch(self, addresses: list[str], ports: list[int] | None, timeout: int | None,
                   now: float) -> tuple[str, list[str], str, float]:
        """The batch lines for one ``add`` (empty when every element is fresh)."""
        target, elements = self._elements(addresses, ports)
        lasting = float("inf") if timeout is None else timeout
        # Still in the set for at least half the new timeout: nothing to do in the kernel.
        expiry = self.expiry[target]
        elements = [e for e in elements if expiry.get(e, 0) - now < lasting / 2]
        if not addresses or not elements:
            return "", [], target, lasting
        prefix = self._prefix(target)
        clause = "" if timeout is None else f" timeout {timeout}s"
        known = [e for e in elements if expiry.get(e, 0) + self.MARGIN_SECONDS > now]
        batch = self._forget("revoked4", [a for a in addresses if self.revoked.get(a, 0) > now])
        batch += f"add {prefix} {{ {', '.join(e + clause for e in elements)} }}\n"
        if known:
            batch += f"delete {prefix} {{ {', '.join(known)} }}\n"
            batch += f"add {prefix} {{ {', '.join(e + clause for e in known)} }}\n"
        return batch, elements, target, lasting

    def prune(self, now: float | None = None) -> int:
        """Forget elements past their expiry (the kernel dropped them already); returns how many."""
        import time

        with self.lock:
            now = time.monotonic() if now is None else now
            held = sum(map(len, self.expiry.values()))
            self.expiry = {target: {e: t for e, t in expiry.items() if t + self.MARGIN_SECONDS > now}
                           for target, expiry in self.expiry.items()}
            self.revoked = {a: t for a, t in self.revoked.items() if t > now}
            kept = sum(map(len, self.expiry.values()))
            self.prune_above = max(self.PRUNE_ABOVE, 2 * kept)
            return held - kept

    def revoke(self, addresses: list[str]) -> None:
        """Take ``addresses`` out of both allow sets and cut their established flows (revoked4)."""
        import time

        if not addresses:
            return
        wanted = set(addresses)
        with self.lock:
            now = time.monotonic()
            gone = {t: [e for e in self.expiry[t] if e.split(" . ")[0] in wanted] for t in ("allow4", "allow4_port")}
            batch = self._forget("allow4", gone["allow4"]) + self._forget("allow4_port", gone["allow4_port"])
            cut = ", ".join(f"{a} timeout {self.REVOKED_SECONDS}s" for a in sorted(wanted))
            batch += self._forget("revoked4", sorted(wanted)) + f"add {self._prefix('revoked4')} {{ {cut} }}\n"
            self._run(batch, "revoke addresses")
            for target, elements in gone.items():
                for element in elements:
                    self.expiry[target].pop(element, None)
            for address in wanted:
                self.revoked[address] = now + self.REVOKED_SECONDS

from dejima.filter.nft import SetWriter


class RecordingNft:
    """Stands in for the nftables handle: records the batches it is given (the kernel's side is
    covered by the integration tests)."""

    def __init__(self) -> None:
        self.batches: list[str] = []

    def cmd(self, text: str) -> tuple[int, str, str]:
        self.batches.append(text)
        return 0, "", ""


def test_new_elements_are_added_once_and_known_ones_refreshed() -> None:
    nft = RecordingNft()
    writer = SetWriter("inet", "dejima", handle=nft)
    writer.add(["203.0.113.5"], [443], 300)
    assert nft.batches[-1] == "add element inet dejima allow4_port { 203.0.113.5 . 443 timeout 300s }\n"
    writer.add(["203.0.113.5"], [443], 300)
    assert len(nft.batches) == 1  # more than half its timeout left: no kernel round trip
    writer.add(["203.0.113.5"], [443], 900)
    assert nft.batches[-1] == (
        "add element inet dejima allow4_port { 203.0.113.5 . 443 timeout 900s }\n"
        "delete element inet dejima allow4_port { 203.0.113.5 . 443 }\n"
        "add element inet dejima allow4_port { 203.0.113.5 . 443 timeout 900s }\n"
    )
    writer.add(["203.0.113.6"], None, 60)
    assert nft.batches[-1] == "add element inet dejima allow4 { 203.0.113.6 timeout 60s }\n"


def test_an_insert_asked_before_a_revoke_does_not_undo_it() -> None:
    import time

    nft = RecordingNft()
    writer = SetWriter("inet", "dejima", handle=nft)
    asked = time.monotonic()
    writer.revoke(["203.0.113.5"])
    writer.add_many([(["203.0.113.5", "203.0.113.6"], None, 300)], asked)
    assert nft.batches[-1] == "add element inet dejima allow4 { 203.0.113.6 timeout 300s }\n"
    writer.add_many([(["203.0.113.5"], None, 300)], time.monotonic())  # control: asked after the revoke
    assert "delete element inet dejima revoked4 { 203.0.113.5 }" in nft.batches[-1]
    assert "add element inet dejima allow4 { 203.0.113.5 timeout 300s }" in nft.batches[-1]


def test_a_map_full_of_live_elements_is_not_copied_on_every_insert() -> None:
    writer = SetWriter("inet", "dejima", handle=RecordingNft())
    for n in range(3 * SetWriter.PRUNE_ABOVE):
        writer.add([f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}"], None, 300)
    # Each prune found every element alive and set the next one at twice the size: a few copies, not thousands.
    assert writer.prune_above >= 2 * SetWriter.PRUNE_ABOVE
    assert sum(map(len, writer.expiry.values())) == 3 * SetWriter.PRUNE_ABOVE


def test_a_prune_forgets_expired_elements_and_says_how_many() -> None:
    """The filter hands freed memory back after a prune that dropped many (filter/__main__.py)."""
    import time

    writer = SetWriter("inet", "dejima", handle=RecordingNft())
    writer.add(["203.0.113.5", "203.0.113.6"], None, 60)
    writer.add(["203.0.113.7"], None, 600)
    now = time.monotonic()
    assert writer.prune(now) == 0
    assert writer.prune(now + 60 + SetWriter.MARGIN_SECONDS + 1) == 2
    assert writer.prune(now + 600 + SetWriter.MARGIN_SECONDS + 1) == 1

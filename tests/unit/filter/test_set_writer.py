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

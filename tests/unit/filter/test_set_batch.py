"""Set inserts of answers completed in one loop tick share one nft transaction, and no answer is
released before the transaction that holds its addresses returned."""

from __future__ import annotations

import asyncio

import pytest

from dejima.filter.nft import NftError, SetWriter
from dejima.filter.setbatch import WINDOW_SECONDS, BatchedSets


class RecordingNft:
    def __init__(self, fail: str = "") -> None:
        self.batches: list[str] = []
        self.fail = fail

    def cmd(self, text: str) -> tuple[int, str, str]:
        self.batches.append(text)
        return (1, "", "refused") if self.fail and self.fail in text else (0, "", "")


def test_answers_of_one_tick_share_a_transaction_and_wait_for_it() -> None:
    nft = RecordingNft()
    sets = BatchedSets(SetWriter("inet", "dejima", handle=nft))
    released: list[tuple[str, int]] = []

    async def answer(address: str) -> None:
        await sets.add([address], None, 300)
        released.append((address, len(nft.batches)))  # how many transactions had run by then

    async def main() -> None:
        await asyncio.gather(answer("203.0.113.1"), answer("203.0.113.2"), answer("203.0.113.3"))

    asyncio.run(main())
    assert len(nft.batches) == 1 and all(f"203.0.113.{n} " in nft.batches[0] for n in (1, 2, 3))
    assert released and all(done == 1 for _a, done in released), "an answer was released before its insert"


def test_a_failed_insert_fails_only_its_own_answer() -> None:
    nft = RecordingNft(fail="203.0.113.66")
    sets = BatchedSets(SetWriter("inet", "dejima", handle=nft))

    async def main() -> tuple[BaseException | None, BaseException | None]:
        return await asyncio.gather(sets.add(["203.0.113.1"], None, 300), sets.add(["203.0.113.66"], None, 300),
                                    return_exceptions=True)

    good, bad = asyncio.run(main())
    assert good is None and isinstance(bad, NftError)
    assert sets.fresh(["203.0.113.1"], None, 300) and not sets.fresh(["203.0.113.66"], None, 300)


@pytest.mark.parametrize("timeout", [300, None])
def test_fresh_follows_what_add_would_do(timeout: int | None) -> None:
    writer = SetWriter("inet", "dejima", handle=RecordingNft())
    assert not writer.fresh(["203.0.113.5"], [443], timeout)
    writer.add(["203.0.113.5"], [443], timeout)
    assert writer.fresh(["203.0.113.5"], [443], timeout)
    assert not writer.fresh(["203.0.113.5"], [80], timeout)
    writer.revoke(["203.0.113.5"])
    assert not writer.fresh(["203.0.113.5"], [443], timeout)


def test_inserts_gather_while_other_answers_are_on_their_way_and_a_lone_one_does_not_wait() -> None:
    nft = RecordingNft()
    sets = BatchedSets(SetWriter("inet", "dejima", handle=nft))
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(sets.add(["203.0.113.1"], None, 300, others=1))  # another answer is coming
        await asyncio.sleep(0)
        assert nft.batches == []  # it waits for the other, up to the window
        await sets.add(["203.0.113.2"], None, 300, others=0)  # the last one: both go now, together
        await first
        half_window: asyncio.Future[None] = loop.create_future()

        def at_half_the_window() -> None:
            order.append("half the window")
            half_window.set_result(None)

        loop.call_later(WINDOW_SECONDS / 2, at_half_the_window)
        await sets.add(["203.0.113.3"], None, 300)  # alone: the next loop turn, not the window's end
        order.append("lone insert done")
        await half_window

    asyncio.run(main())
    assert len(nft.batches) == 2 and "203.0.113.1 " in nft.batches[0] and "203.0.113.2 " in nft.batches[0]
    assert order == ["lone insert done", "half the window"]

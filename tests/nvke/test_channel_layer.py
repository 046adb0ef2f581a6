"""A closing websocket cancels its consumer's channel-layer receive, which must then end wherever the
cancellation lands: a lost one (redis-py's asyncio.wait_for on Python 3.11, see ASYNC_REDIS_OPTIONS in
nvke/settings.py) left the receive polling Redis forever, the consumer with it."""

import asyncio

import pytest
from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers
from django.conf import settings

# Cancel 0 to 10 ms after the receive starts, in steps of a third of a millisecond, ten times over: the
# cancellation lands while connecting, in the clean-up script, in the BZPOPMIN write and in its read.
DELAYS_S = [step / 3000 for step in range(30)] * 10


@pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis channel layer needs REDIS_URL")
def test_a_cancelled_receive_always_ends():
    async def cancel_receives() -> list[float]:
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        lost = []
        try:
            for delay in DELAYS_S:
                receive = asyncio.ensure_future(layer.receive(await layer.new_channel()))
                await asyncio.sleep(delay)
                receive.cancel()
                # A cancelled receive ends at once; one that lost the cancellation polls BZPOPMIN again
                # every 5 s and never ends.
                _, pending = await asyncio.wait([receive], timeout=6)
                if pending:
                    lost.append(delay)
                    break
        finally:
            await layer.close_pools()
        return lost

    # Not asyncio.run: at its end it would wait for a lost receive forever instead of failing.
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(cancel_receives()) == []
    finally:
        loop.close()

"""How a network thread (processor.py) hands its connections' complete requests to the
request handlers (handler_pool.py), and what it does when their queue is full.

A Produce request takes the Produce requests queued right behind it on the same connection
along (up to `MAX_QUEUED_REQUESTS` and the connection's request size), one handler call for
them all. Requests that may wait long in their handler go to a pool of their own
(`WAITING_APIS`); those whose answer waits on others answer later, without a thread
(later.py). When the chosen pool's queue is full the request
stays parked on its channel, read and holding its pool bytes, and the channel muted; parked
channels are tried again, in the order they parked, when a pool has room.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .channel import MAX_QUEUED_REQUESTS, Channel, PeerClosed, Step
from .connection import Outcome
from .framing import API_KEY_AND_VERSION, FrameError

if TYPE_CHECKING:
    from .listener_context import ListenerContext

# Requests that may wait long in their handler: a long-poll Fetch and an acks=all Produce
# (up to its timeout_ms while a follower lags, before the ISR shrinks). Kafka's broker parks
# them in a purgatory without a thread; here a handler waits on its thread, so they run on a
# pool of their own, and a stalled node or a crowd of long polls never holds up metadata,
# SASL, offsets or the group heartbeats that keep consumers in their groups.
PRODUCE_KEY, FETCH_KEY = 0, 1
WAITING_APIS = frozenset({PRODUCE_KEY, FETCH_KEY})
# A JoinGroup waits until every member of its group has joined, a follower's SyncGroup until
# its leader's: each waits for other requests of the same kind, so a pool of a fixed number
# of threads they waited in would fill with waiting members while the requests that would
# end their wait sat queued behind them. They answer later instead (later.py), holding no
# thread, and share the request handlers with every other api.


class RequestDispatch:
    """One network thread's side of the handler pools: its requests submitted, its parked
    channels. `answer(channel, outcome)` takes a handler's outcome back to the thread (from
    the handler's thread); `wakeup()` wakes the thread when a pool has room again."""

    def __init__(
        self,
        context: ListenerContext,
        *,
        answer: Callable[[Channel, Outcome], None],
        wakeup: Callable[[], None],
    ) -> None:
        self.context = context
        self._answer = answer
        self._wakeup = wakeup
        self._waiting_queue: deque[Channel] = deque()
        self._queue_room = False
        context.handlers.notify_on_room(self._on_queue_room)
        context.waiting_handlers.notify_on_room(self._on_queue_room)

    @property
    def room_pending(self) -> bool:
        """A pool may have room for a parked channel: the thread should not sleep."""
        return self._queue_room

    def _on_queue_room(self) -> None:
        if self._waiting_queue:
            self._queue_room = True
            self._wakeup()

    def retry_parked(self) -> None:
        """Parked channels dispatched in turn, while the pools take them."""
        if self._queue_room:
            self._queue_room = False
            while self._waiting_queue:
                channel = self._waiting_queue[0]
                if (
                    not channel.closed
                    and channel.waiting_queue
                    and not self._dispatch_parked(channel)
                ):
                    break
                self._waiting_queue.popleft()

    def forget(self, channel: Channel) -> None:
        """A closing channel is parked no more."""
        if channel.waiting_queue and channel in self._waiting_queue:
            self._waiting_queue.remove(channel)

    def dispatch(self, channel: Channel, now: float) -> None:
        """The complete frame, and the Produce requests queued right behind it, to a
        handler; the channel is muted until their answers are sent."""
        frame, held, raw = channel.take_frame()
        frames = [frame]
        if not raw:
            api_key, api_version = API_KEY_AND_VERSION.unpack_from(frame)
            if channel.connection.batches(api_key, api_version):
                while len(frames) < MAX_QUEUED_REQUESTS and held < channel.max_request_bytes:
                    try:
                        step = channel.read_frame(now, coalescing=(api_key, held))
                    except (PeerClosed, FrameError, OSError):
                        break  # met again, and acted on, when reading goes on
                    if step is not Step.COMPLETE:
                        break
                    following, size, _ = channel.take_frame()
                    frames.append(following)
                    held += size
        channel.in_flight = True
        channel.in_flight_bytes = held
        channel.parked = (frames, raw)
        if not self._dispatch_parked(channel):
            channel.waiting_queue = True
            self._waiting_queue.append(channel)
            self._queue_room = True  # tried again on the next turn, as memory waits are

    def _dispatch_parked(self, channel: Channel) -> bool:
        """Queues the channel's read request(s) for a handler; False when the queue is full."""
        assert channel.parked is not None
        frames, raw = channel.parked
        connection = channel.connection
        api_key = -1 if raw else API_KEY_AND_VERSION.unpack_from(frames[0])[0]
        if api_key in WAITING_APIS:
            handlers = self.context.waiting_handlers
        else:
            handlers = self.context.handlers

        def handle() -> None:
            try:
                outcome = connection.handle(frames, raw)
            except BaseException:
                self._answer(channel, Outcome(close=True))
                raise
            finally:
                frames.clear()  # the frames' memory goes with their pool bytes, not later
            self._answer(channel, outcome)

        channel.handling = True
        if not handlers.try_submit(handle):
            channel.handling = False
            return False
        channel.parked = None
        channel.waiting_queue = False
        return True

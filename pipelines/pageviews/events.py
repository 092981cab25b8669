"""The events: page views as a site's front end would send them, JSON, keyed by user id so a
user's views stay in order in one partition. Event times advance about one view per
`spacing_ms` and arrive up to `max_lateness_ms` out of order, as mobile clients' do."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/account", "/help", "/blog"]
# Most traffic goes to a few pages (roughly Zipf), as on real sites.
PAGE_WEIGHTS = [1 / (rank + 1) for rank in range(len(PAGES))]
REFERRERS = ["direct", "search", "social", "email", "ads"]


@dataclass(frozen=True)
class PageView:
    user_id: str
    page: str
    referrer: str
    duration_ms: int
    event_time_ms: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "user_id": self.user_id,
                "page": self.page,
                "referrer": self.referrer,
                "duration_ms": self.duration_ms,
                "event_time": self.event_time_ms,
            },
            separators=(",", ":"),
        ).encode()


def page_views(
    count: int,
    *,
    start_ms: int,
    spacing_ms: int = 200,
    max_lateness_ms: int = 20_000,
    users: int = 500,
    seed: int = 1,
) -> Iterator[PageView]:
    rng = random.Random(seed)
    for i in range(count):
        lateness = rng.randrange(max_lateness_ms) if rng.random() < 0.1 else 0
        yield PageView(
            user_id=f"user-{rng.randrange(users):04d}",
            page=rng.choices(PAGES, PAGE_WEIGHTS)[0],
            referrer=rng.choice(REFERRERS),
            duration_ms=int(rng.lognormvariate(8, 1)),
            event_time_ms=max(start_ms, start_ms + i * spacing_ms - lateness),
        )

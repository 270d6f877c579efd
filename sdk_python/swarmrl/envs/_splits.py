"""An environment's splits as the runner reads them: held-out items once, the train
stream without them, and every read off the event loop.

Rules it keeps (each tested):

- **Held-out items are never trained.** The content digests (`Item.digest`) of every val
  and test item are taken first; a train item with one of those digests is skipped and
  counted. val and test sharing an item is an error.
- **Reading never blocks the loop.** ``items()`` and each step of the train stream run in
  a worker thread (an environment may compile games or read files there): heartbeats,
  other rollouts and the progress bar go on meanwhile.
- **A stream of held-out items fails instead of spinning.** After `max_skips` train items
  in a row that are val or test items (10,000, or twice the held-out items if more), or
  a pass over a finite split that yields none, the stream raises `ValueError`.
- **A finite train split is cycled**: a sequence (a list) is reshuffled each pass with
  the runner's seed; any other iterable (a generator) is asked for again
  (``items("train")`` is called once per pass), in the order it gives.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Iterable, Iterator, Sequence

from swarmrl.envs._api import Environment, Item, Split

__all__ = ["MAX_SKIPS", "Splits"]

MAX_SKIPS = 10_000
"""Train items in a row that may be held-out items before the stream gives up (at least:
twice the number of held-out items when that is more)."""


class Splits:
    """The held-out items of an environment (read once) and its train stream."""

    def __init__(self, env: Environment, seed: int) -> None:
        self.env = env
        self.seed = seed
        self.skipped_held_out = 0
        """Train items skipped so far because their content is a val or test item's."""
        self._digests: dict[str, str] | None = None
        """Content digest -> split, of every val and test item."""
        self._items: dict[str, list[Item]] = {}
        self._lock = threading.Lock()
        self._stream: Iterator[Item] | None = None
        self._pending: asyncio.Future[Item | None] | None = None

    # -- held out -----------------------------------------------------------------------

    def held_out(self, split: Split) -> list[Item]:
        """The val or test items (read once), after checking val and test share none."""
        with self._lock:
            if self._digests is None:
                digests: dict[str, str] = {}
                items: dict[str, list[Item]] = {}
                names: tuple[Split, ...] = ("val", "test")
                for name in names:
                    items[name] = list(self.env.items(name))
                    for item in items[name]:
                        other = digests.setdefault(item.digest, name)
                        if other != name:
                            raise ValueError(
                                f"{self.env.label}: item {item.id!r} of {name} has the "
                                f"content of a {other} item; val and test must not share "
                                "items")
                self._items, self._digests = items, digests
        return self._items[split]

    async def load(self) -> None:
        """Reads the held-out items in a worker thread (a no-op once read)."""
        if self._digests is None:
            await asyncio.to_thread(self.held_out, "val")

    @property
    def max_skips(self) -> int:
        return max(MAX_SKIPS, 2 * len(self._digests or ()))

    # -- train ----------------------------------------------------------------------------

    def train_items(self) -> Iterator[Item]:
        """Train items, never one whose content is a val or test item's (counted in
        `skipped_held_out`); a finite split is cycled (see the module docstring). Runs
        on the caller's thread: `next_train` steps it in a worker thread."""
        digests = self._digests
        if digests is None:
            self.held_out("val")
            digests = self._digests
        assert digests is not None
        rng = random.Random(self.seed)
        first: Iterable[Item] | None = self.env.items("train")
        in_a_row = 0
        for n in itertools.count():
            source = first if first is not None else self.env.items("train")
            order: Iterable[Item] = source
            if isinstance(source, Sequence):
                order = list(source)
                rng.shuffle(order)
                first = source  # a list is reshuffled, not asked for again
            else:
                first = None
            seen = yielded = 0
            for item in order:
                seen += 1
                if item.digest in digests:
                    self.skipped_held_out += 1
                    in_a_row += 1
                    if in_a_row >= self.max_skips:
                        raise ValueError(
                            f"{self.env.label}: the train split gave {in_a_row} items in a "
                            "row whose content is a val or test item's; train items must "
                            "differ from the held-out ones")
                    continue
                in_a_row = 0
                yielded += 1
                yield item
            if not yielded:
                raise ValueError(
                    f"{self.env.label}: the train split has no item that is not also a "
                    "val or test item" if seen else
                    f"{self.env.label}: items('train') gave no item"
                    + (f" on pass {n + 1}: a finite train iterable is asked for again each "
                       "pass, and must give its items anew" if n else ""))

    async def next_train(self) -> Item | None:
        """The next train item, stepped in a worker thread (None if the stream ends). A
        step cancelled midway is not lost: the next call takes its item."""
        if self._pending is None:
            if self._stream is None:
                self._stream = self.train_items()
            self._pending = asyncio.ensure_future(asyncio.to_thread(next, self._stream, None))
        pending = self._pending
        try:
            return await asyncio.shield(pending)
        finally:
            if pending.done():
                self._pending = None

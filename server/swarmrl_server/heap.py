"""A server process's long-lived heap, kept out of the cyclic garbage collector's way.

A server imports torch, transformers, gRPC and the app, then loads its models: about a
million objects that live until it exits. CPython runs a full collection, which walks
every tracked object, whenever the objects that survived younger collections since the
last one reach a quarter of those it kept; a heap growing tenfold during imports pays
about ten of them. Measured on the test suite's processes: 8 to 15 full collections
while importing, 1.3 to 2.8 s of CPU per process (each forkserver, study run and test
worker), then a full collection now and then that walks the same objects again.

`long_lived()` pauses the collector for a block that builds such objects, then freezes
everything tracked (`gc.freeze()`: the permanent generation, which no collection
visits); what is allocated later is collected as before. vLLM's engine core freezes its
heap after start-up the same way (`vllm.utils.gc_utils.freeze_gc_heap`). A fork inherits
the frozen heap: a server forked from a forkserver does not walk its imports again.

The cost: a frozen object that later becomes cyclic garbage is never freed. Wrap only
what is meant to live as long as the process (imports, the app, loaded models).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived(*, collect: bool = False) -> Iterator[None]:
    """The block with the cyclic collector paused, then every tracked object frozen (an
    O(1) splice of the generations' lists).

    Garbage the block leaves in cycles is frozen with the rest unless `collect`: imports
    leave little (32,000 objects in a test worker's 800,000), and collecting it would walk
    them all once more (0.7 s there). A block that loads models may leave a weight-sized
    tensor in a cycle, so the server's start-up collects first, as vLLM does."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collect:
            gc.collect()
        gc.freeze()
        if was_enabled:
            gc.enable()

"""Waiting on a condition in tests: poll until it holds, fail with what was awaited.

Tests wait on what a user would see (a label, a socket, a stream's message) with a deadline, never
by sleeping a fixed time; this is the one polling loop for conditions nothing notifies about.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
) -> T:
    """`predicate()`'s first truthy result; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout:g}s")
        time.sleep(interval)
    return result

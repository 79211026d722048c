"""Two-press Ctrl-C: the first press asks for a clean stop, the second stops at once.

Torch-free, so a sweep's parent process (:mod:`sglab.sweep.local`) and the training
schedule (:mod:`sglab.train.schedule`) share it without loading a model.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def first_ctrl_c(event: threading.Event | None = None,
                 on_press: Callable[[], None] | None = None) -> Iterator[threading.Event]:
    """Yield ``event`` (a new one if None), set by the first Ctrl-C (SIGINT) in the block,
    which also calls ``on_press``; the next Ctrl-C raises KeyboardInterrupt at once. An
    event already set on entry (a stop asked before) makes the first Ctrl-C the second.
    Outside the main thread, where signals cannot be handled, no handler is installed and
    only the caller sets the event. The previous handler is restored on leaving."""
    pressed = event if event is not None else threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def handle(signum, frame):
        pressed.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if on_press is not None:
            on_press()

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler if pressed.is_set() else handle)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)

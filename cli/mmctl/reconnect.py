"""Try a request again when no connection to the server could be made, for `mmctl infer` and `chat`.

A connection that is refused, finds no route, or is not made within the connect timeout never reached
a server, so sending the request again is safe: behind a Service, the next connection may reach another
pod (kube-proxy picks one per connection). That is what keeps a client whole while a lost node's pod is
still an endpoint, until the operator marks it not ready (docs/rollouts.md). A request that reached a
server and failed there is never sent again. Stdlib only.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TypeVar

Answer = TypeVar("Answer")

DEFAULT_CONNECT_SECONDS = 5.0
DEFAULT_CONNECT_RETRIES = 3
# A moment before the next try: a refused connection fails at once, and kube-proxy or a restarting pod
# may need it.
_PAUSE_SECONDS = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--connect-timeout` and `--connect-retries`."""
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_SECONDS,
        metavar="SECONDS",
        help=f"give up a connection not made in this time (default {DEFAULT_CONNECT_SECONDS:g})",
    )
    parser.add_argument(
        "--connect-retries",
        type=int,
        default=DEFAULT_CONNECT_RETRIES,
        metavar="N",
        help=(
            "connect again this many times when no connection could be made, which is safe: the request "
            f"never reached a server (default {DEFAULT_CONNECT_RETRIES})"
        ),
    )


def with_reconnects(
    attempt: Callable[[], Answer],
    *,
    never_connected: Callable[[Exception], bool],
    retries: int,
    command: str,
) -> Answer:
    """`attempt()`, tried again up to `retries` times while it fails without having connected.

    Each new try is said on stderr (`... trying again (k of n)`), so a caller can count them.
    """
    tried = 0
    while True:
        try:
            return attempt()
        except Exception as error:
            if tried >= retries or not never_connected(error):
                raise
            tried += 1
            say = f"mmctl {command}: no connection ({error}); trying again ({tried} of {retries})"
            print(say, file=sys.stderr)
            time.sleep(_PAUSE_SECONDS)

"""Free loopback ports and waiting for services to listen."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, alive=lambda: True, host: str = "127.0.0.1") -> None:
    """Block until ``host:port`` accepts connections; raise TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"the process meant to listen on {host}:{port} exited")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


class PortInUse(RuntimeError):
    """A port a local service was asked to listen on is taken; the message names the address."""


def ensure_free(port: int, host: str = "127.0.0.1", hint: str = "choose another with --port PORT") -> None:
    """Return if ``host:port`` can be listened on; :class:`PortInUse` naming it (and what to do, ``hint``) otherwise.

    A service started on a taken port fails, or worse, the check that it listens finds
    the other process and reports it started.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT does not block them
        try:
            s.bind((host, port))
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            raise PortInUse(f"{host}:{port} is not free ({reason}): {hint}") from None

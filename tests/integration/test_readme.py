"""The quick starts run as written and print a right answer.

Every code block marked `<!-- readme-test: KIND NAME -->` on the line before its ```python fence, in README.md or
docs/*.md, is written to a file and run in its own process with this interpreter (`OMP_NUM_THREADS=1`). KIND
"python" runs alone; "server" runs against a real `asymspec serve` on 127.0.0.1 started with the options of the
last `asymspec serve ...` the document shows before the block (its `--port` aside: the server takes a free one), and
the block reads the server's address from `ASYMSPEC_BASE_URL`; "vllm" runs against the raw bundled pair on two
real vLLM servers (`make vllm-start`'s models; their addresses in `VERIFIER_URL` and `DRAFTER_URL`; skipped where
vLLM's virtualenv is missing). Each block's output must contain the answer its tool returned, or the code its note
holds (EXPECTED).
"""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from asymspec_agents.server.process import ServerProcess
from asymspec_agents.server.vllm import VENV, VllmProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- readme-test:"
BLOCK = re.compile(r"^<!-- readme-test: (\S+) (\S+) -->\n```python\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SERVE = re.compile(r"`asymspec serve([^`]*)`")
# block name -> what its output must contain: the population its tool returned for the question's country, or the
# code the question's note holds
EXPECTED = {"langgraph": "68.4", "llamaindex": "55.1", "openai": "19.6", "langchain-forced": "55.1",
            "own-folders": "4417", "own-gguf": "4417", "own-vllm": "4417"}
KINDS = ("python", "server", "vllm")
TIMEOUT = 300  # seconds per block: imports, model loads and a short agent run on one thread


def marked_blocks() -> dict[str, tuple[str, str, str, list[str]]]:
    """name -> (kind, code, the document it is in, the `asymspec serve` options shown before it)."""
    blocks = {}
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            kind, name, code = match.groups()
            where = str(document.relative_to(ROOT))
            assert name not in blocks, f"two blocks are named {name!r} ({blocks[name][2]}, {where})"
            serves = SERVE.findall(text[:match.start()])
            options = re.sub(r"--port[ =]\d+", "", serves[-1]).split() if serves else []
            blocks[name] = (kind, code, where, options)
    return blocks


BLOCKS = marked_blocks()


def names_of(kind: str) -> list[str]:
    return [name for name, (block_kind, *_) in BLOCKS.items() if block_kind == kind]


def run_block(name: str, tmp_path: Path, **env: str) -> str:
    kind, code, where, _ = BLOCKS[name]
    script = tmp_path / f"readme_block_{name.replace('-', '_')}.py"  # not `langgraph.py`: it would shadow the package
    script.write_text(code, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                         env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    assert out.returncode == 0, f"{where}, block {name!r} exited with {out.returncode}:\n{out.stderr[-3000:]}"
    print(f"\n{where}, block {name!r}:\n{out.stdout}")
    return out.stdout


def test_every_marker_opens_a_block_with_a_known_kind_and_an_expected_answer():
    markers = sum(document.read_text(encoding="utf-8").count(MARKER) for document in DOCUMENTS)
    assert markers == len(BLOCKS), "a readme-test marker is not followed directly by a ```python block"
    assert {kind for kind, *_ in BLOCKS.values()} <= set(KINDS)
    assert set(BLOCKS) == set(EXPECTED), "each marked block needs its answer in EXPECTED, and each answer a block"


@pytest.mark.parametrize("name", names_of("python"))
def test_block_runs_and_prints_the_answer(name, tmp_path):
    stdout = run_block(name, tmp_path)
    assert EXPECTED[name] in stdout, stdout


@pytest.mark.parametrize("name", names_of("server"))
def test_block_against_a_running_server_prints_the_answer(name, tmp_path):
    with ServerProcess(BLOCKS[name][3], threads=1) as server:
        stdout = run_block(name, tmp_path, ASYMSPEC_BASE_URL=server.base_url)
    assert server.returncode == 0, server.log()[-3000:]
    assert EXPECTED[name] in stdout, (stdout, server.log()[-3000:])


@pytest.mark.parametrize("name", names_of("vllm"))
@pytest.mark.skipif(not (VENV / "bin" / "python").is_file(), reason="vLLM's virtualenv is missing: make vllm-venv")
def test_block_against_vllm_servers_prints_the_answer(name, tmp_path):
    servers = VllmProcess("bundled"), VllmProcess("bundled-small")
    starts = [threading.Thread(target=server.start) for server in servers]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    try:
        for server in servers:
            assert server.process is not None and server.process.poll() is None, server.log()[-3000:]
        stdout = run_block(name, tmp_path, VERIFIER_URL=servers[0].base_url, DRAFTER_URL=servers[1].base_url)
    finally:
        for server in servers:
            server.stop()
    assert EXPECTED[name] in stdout, stdout

"""Cold start of `trtserve run`: seconds from spawning the process to /v2/health/ready answering 200,
beside the interpreter's `python -c "import torch"` measured the same way, and the server's own
breakdown (its start-up log line). Each is run `--runs` times; the median is reported.

    .venv/bin/python scripts/bench_cold_start.py engines/smollm2-135m --threads 2 [--before DIR]

--before DIR: another trtserve's source tree (e.g. `git archive HEAD | tar -x -C DIR`), run the same
way, alternating with this one, so both see the same machine.

--bytecode: run every side with its modules' bytecode cached (in a private PYTHONPYCACHEPREFIX, filled
by one untimed run of each first), as an installed wheel has it. Without it the environment decides:
with PYTHONDONTWRITEBYTECODE set and an editable install, each start compiles trtserve's modules from
source while torch's come compiled from its wheel.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from peers.server import free_port


def import_torch(env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=env)
    return time.perf_counter() - start


def start_to_ready(engine: str, env: dict, extra: list[str]) -> tuple[float, str]:
    """Seconds to readiness, and the server's start-up log line."""
    port = free_port()
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "trtserve.cli", "run", engine, "--port", str(port), "--state-dir", "none", *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tempfile.gettempdir(),  # `python -m` puts the cwd first: never this checkout by accident
        )
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(Path(log.name).read_text()[-2000:])
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
            ready = time.perf_counter() - start
        finally:
            proc.terminate()
            proc.wait(30)
        line = next((m for m in re.findall(r"start-up: .*", Path(log.name).read_text())), "")
    return ready, line


def _each(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", help="a checkout of another trtserve to compare (put first on PYTHONPATH)")
    ap.add_argument("--bytecode", action="store_true", help="cache every side's bytecode first (see above)")
    ap.add_argument("extra", nargs="*", help="more `trtserve run` arguments")
    args = ap.parse_args()
    args.engine = str(Path(args.engine).resolve())
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if args.bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-cold-start-pyc-")
    variants = {"this": env} | ({"before": {**env, "PYTHONPATH": args.before}} if args.before else {})
    if args.bytecode:  # untimed: compiles and caches what each side imports
        import_torch(env)
        for e in variants.values():
            start_to_ready(args.engine, e, args.extra)
    torch_s: list[float] = []
    runs: dict[str, list] = {name: [] for name in variants}
    for _ in range(args.runs):  # alternated, so a busier minute does not favour one side
        torch_s.append(import_torch(env))
        for name, e in variants.items():
            runs[name].append(start_to_ready(args.engine, e, args.extra))
    base = statistics.median(torch_s)
    print(f"python -c 'import torch': {base:.2f} s (median of {_each(torch_s)})")
    for name, rs in runs.items():
        ready = statistics.median(r for r, _ in rs)
        each = _each([r for r, _ in rs])
        print(f"{name}: start-to-ready {ready:.2f} s (median of {each}); {ready - base:+.2f} s over the import")
    print(f"this one's last breakdown: {runs['this'][-1][1] or '(no start-up line)'}")
    if args.bytecode:
        shutil.rmtree(env["PYTHONPYCACHEPREFIX"], ignore_errors=True)


if __name__ == "__main__":
    main()

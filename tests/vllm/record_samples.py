"""Re-record ``data/rollouts/tokens/`` from a real vLLM: ``python -m tests.vllm.record_samples``.

Starts the tier's server (``CONTAGENT_VLLM_PYTHON``, ``CONTAGENT_VLLM_MODEL``, as
scripts/ci-vllm.sh sets them; or ``--url`` of one already serving the tiny model),
runs each scenario of :mod:`tests.vllm.conversations` as one rollout through a
recording proxy with token capture on, and writes each rollout's raw log and
``result.json``. Run from the repository root with the project's venv::

    scripts/ci-vllm.sh --install-only
    CONTAGENT_VLLM_PYTHON=... CONTAGENT_VLLM_MODEL=... .venv/bin/python -m tests.vllm.record_samples
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from contagent.layout import RolloutPaths
from contagent.proxy import start_proxy_in_thread
from contagent.proxy.identify import plan_tokens
from contagent.rawlog.result import RolloutResult
from tests.vllm import server as vllm_server
from tests.vllm.conversations import MODEL, SCENARIOS, Chat, Meta

EXPERIMENT = "tokens"
#: rollout ids are the scenario names with this prefix: unique beside data/rollouts' others
PREFIX = "tokens_"


def record(url: str, meta: Meta, out: Path, names: list[str]) -> list[Path]:
    """Record each named scenario as a rollout under ``out``; the rollout folders."""
    plan = plan_tokens("on", url)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        with start_proxy_in_thread(url, Path(tmp), tokens=True, server=plan.server) as proxy:
            for scenario in names:
                name = PREFIX + scenario
                started = time.time()
                passed = SCENARIOS[scenario](Chat(proxy.rollout_base_url(name), meta))
                ended = time.time()
                result = RolloutResult(
                    rollout_id=name, experiment=EXPERIMENT, model=MODEL,
                    status="passed" if passed else "failed", passed=passed,
                    reward=1.0 if passed else 0.0, stop_condition="finished",
                    started=started, ended=ended, duration_s=ended - started,
                    run_id="tokens-samples", repeat_index=0, agent="scripted",
                    server=plan.server,
                )  # fmt: skip
                paths = RolloutPaths.for_rollout(Path(tmp), name)
                paths.result.write_text(result.model_dump_json(indent=2) + "\n")
        for name in (PREFIX + n for n in names):
            src = RolloutPaths.for_rollout(Path(tmp), name).root
            dest = out / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(src, dest)
            written.append(dest)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="record_samples")
    parser.add_argument("out", nargs="?", type=Path, default=Path("data/rollouts/tokens"))
    parser.add_argument("--url", help="a vLLM already serving the tiny model")
    parser.add_argument("--only", action="append", help="record this scenario (repeatable)")
    args = parser.parse_args()
    model = Path(os.environ["CONTAGENT_VLLM_MODEL"])
    meta = Meta.load(model)
    names = args.only or list(SCENARIOS)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.url:
        paths = record(args.url, meta, args.out, names)
    else:
        log = args.out.parent / "vllm-record.log"
        with vllm_server.serving(model, Path(tempfile.gettempdir()) / log.name) as srv:
            paths = record(srv.url, meta, args.out, names)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()

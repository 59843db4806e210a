"""TRL's AsyncGRPOTrainer data path fed by contagent groups, on the CPU.

The rollouts are the engine's on the in-process stand-in (real recording proxies, the
scripted stub, the export's code). TRL's own ``RolloutQueueDataset`` (its staleness
check included), ``FixedCountBatcher`` and ``DataCollatorForRollout`` read the worker's
queue while the trainer's versions move through ``update_model_version``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contagent.engine import EngineConfig
from contagent.engine.trl_worker import ContagentRolloutWorker
from contagent.export.exporter import ExportOptions
from contagent.rawlog.policy_journal import read_policy_journal
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.testing.inprocess import InProcessExecutor
from contagent.testing.llm_stub import RunningStub
from contagent.testing.stub_tokens import BYTE_BASE, SPECIAL
from tests.runner.helpers import write_experiment

pytestmark = pytest.mark.trainers

#: the stub's logprobs mode is not probed: its samples are taken as the sampler's
SAMPLING = ExportOptions(allow_raw_logprobs=True)


def stub_decode(ids: list[int]) -> str:
    """The stub's own tokenizer, backwards."""
    return "".join(SPECIAL[i] if i < BYTE_BASE else chr(i - BYTE_BASE) for i in ids)


def engine_config(tmp_path: Path, stub: RunningStub, temperature: float = 1.0) -> EngineConfig:
    for name in ("a", "b", "c", "d"):
        write_experiment(tmp_path / "exps", name, {"task": f"task {name}"})
    run = RunConfig(
        experiments_dir=tmp_path / "exps",
        log_dir=tmp_path / "logs",
        upstream_url=stub.url,
        llm=LlmOptions("m", temperature=temperature),
        wait_for_llm_s=5,
        jobs=2,
    )
    return EngineConfig(run=run, export=SAMPLING)


class NoTransfer:
    """A weight transfer that moves nothing (there is no inference server to load into)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def init_weight_transfer(self) -> None:
        self.calls.append("init")

    def pause(self) -> None:
        self.calls.append("pause")

    def send_weights(self, iterator: Any) -> None:
        self.calls.append("send")

    def resume(self) -> None:
        self.calls.append("resume")

    def destroy(self) -> None:
        self.calls.append("destroy")


def test_trl_data_path_takes_contagent_groups_with_versions_moving(
    stub: RunningStub, tmp_path: Path
) -> None:
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_grpo_trainer import (
        DataCollatorForRollout,
        FixedCountBatcher,
        RolloutQueueDataset,
    )

    PartialState()  # TRL logs through accelerate, as inside its trainer
    go = {name: threading.Event() for name in ("b", "c", "d")}

    def verdict(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
        if plan.experiment.name in go:  # each group starts when the test lets it
            go[plan.experiment.name].wait(60)
        return ("passed", 1.0) if plan.repeat_index == 0 else ("failed", 0.0)

    worker = ContagentRolloutWorker(
        engine_config(tmp_path, stub),
        ["a", "b", "c", "d"],
        group_size=2,
        executor=partial(InProcessExecutor, steps=3, verdict=verdict),
        decode=stub_decode,
    )
    transfer = worker.gated(NoTransfer())
    version = [0]

    def sync(to: int) -> None:  # TRL's _sync_weight_merged, in its order
        transfer.pause()
        transfer.send_weights(iter(()))
        transfer.resume()
        version[0] = to
        worker.update_model_version(to)

    metrics: dict[str, list[Any]] = defaultdict(list)
    dataset = RolloutQueueDataset(
        worker.rollout_buffer, lambda: version[0], worker.check_health, 60, metrics,
        max_staleness=1, poll_interval_s=0.2,
    )  # fmt: skip
    batches = iter(FixedCountBatcher(dataset, num_processes=1, microbatch_size=2))
    collate = DataCollatorForRollout(pad_token_id=0, metrics=metrics)
    worker.start()
    try:
        first = next(batches)  # group a, sampled under version 0
        sync(1)
        go["b"].set()
        second = next(batches)  # group b, under version 1
        go["c"].set()
        while worker.rollout_buffer.qsize() < 2:  # c's samples wait, sampled under 1
            worker.check_health(60)
            threading.Event().wait(0.05)
        sync(2)
        sync(3)  # c is now 2 behind: TRL's check drops it
        go["d"].set()
        third = next(batches)
    finally:
        worker.stop()

    def taken(rows: list[Any]) -> list[dict[str, Any]]:
        return [s for row in rows for s in row.samples]

    assert [{s["group_id"] for s in taken(b)} for b in (first, second, third)] == [{0}, {1}, {3}]
    assert metrics["sample/dropped_stale_total"] == [1.0, 1.0]
    assert metrics["sample/staleness_max"] == [0.0] * 6
    assert transfer._inner.calls == ["pause", "send", "resume"] * 3  # type: ignore[attr-defined]
    for batch_rows in (first, second, third):
        samples = taken(batch_rows)
        assert sorted(s["advantage"] for s in samples) == [-0.5, 0.5]  # rewards 1 and 0
        batch = collate([batch_rows])
        want = sorted(
            float(lp) for s in samples
            for lp, m in zip(s["old_log_probs"][1:], s["completion_mask"][1:], strict=True) if m
        )  # fmt: skip
        assert want and sorted(batch["old_log_probs"][0].tolist()) == pytest.approx(want)
        assert int(batch["global_n_tokens"][0]) == len(want)
    assert metrics["reward"] and set(metrics["reward"]) == {0.5}

    logs = tmp_path / "logs" / "rollouts"
    assert {p.name for p in logs.iterdir()} == {
        "a", "a_r1", "b", "b_r1", "c", "c_r1", "d", "d_r1"
    }  # fmt: skip


def sdpa_varlen(
    q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
    softmax_scale: float | None = None, causal: bool = True, **_: Any,
) -> Any:  # fmt: skip
    """flash-attn's ``flash_attn_varlen_func`` (causal, bottom-right aligned) by plain SDPA,
    one segment at a time: the CPU stand-in for the kernel TRL fetches from the Hub."""
    import torch
    import torch.nn.functional as F

    out = []
    for s in range(len(cu_q) - 1):
        qs, ks, vs = (
            x[int(lo) : int(hi)].transpose(0, 1)
            for x, lo, hi in ((q, cu_q[s], cu_q[s + 1]), (k, cu_k[s], cu_k[s + 1]), (v, cu_k[s], cu_k[s + 1]))
        )  # fmt: skip
        lq, lk = qs.shape[1], ks.shape[1]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        out.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=softmax_scale))
    return torch.cat([o.transpose(0, 1) for o in out])


def test_async_grpo_trainer_trains_steps_on_contagent_groups(
    stub: RunningStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two documented test-only patches let TRL's trainer run on a CPU-only torch: no peak
    FLOPs (it asks ``torch.cuda`` for the device's name) and SDPA in place of the
    flash-attention kernel its tree attention fetches from the Hub."""
    import itertools
    from types import SimpleNamespace

    import torch
    from datasets import Dataset
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer, packing
    from trl.experimental.async_grpo import async_grpo_trainer as trainer_module

    from tests.trainers import tiny

    monkeypatch.setattr(trainer_module, "get_peak_flops_per_device", lambda *a: None)
    monkeypatch.setattr(
        packing, "_flash_attn", lambda: SimpleNamespace(flash_attn_varlen_func=sdpa_varlen)
    )
    tok = tiny.tokenizer(["task a", "ran 0"], list(SPECIAL), "<|im_end|>", None)
    model_dir = tmp_path / "model"
    tiny.model(max(len(tok), 512)).save_pretrained(model_dir)
    before = {n: p.detach().clone() for n, p in tiny.model(max(len(tok), 512)).named_parameters()}

    def verdict(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
        return ("passed", 1.0) if plan.repeat_index % 2 == 0 else ("failed", 0.0)

    worker = ContagentRolloutWorker(
        replace(engine_config(tmp_path, stub), max_groups=2), itertools.cycle(["a", "b"]),
        group_size=2, executor=partial(InProcessExecutor, steps=3, verdict=verdict),
        decode=stub_decode, buffer_size=4,
    )  # fmt: skip
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
        token_budget=0, use_cpu=True, dtype="float32", learning_rate=1e-2, report_to=[],
        logging_steps=1, save_strategy="no", max_staleness=1, weight_sync_steps=1,
    )  # fmt: skip
    trainer = AsyncGRPOTrainer(
        model=str(model_dir), args=args, processing_class=tok,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * 2}),
        rollout_worker=worker, weight_transfer=worker.gated(NoTransfer()),
    )  # fmt: skip
    trainer.train()

    assert trainer.state.global_step == 3
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert all(e["grad_norm"] > 0 for e in trainer.state.log_history if "grad_norm" in e)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)  # it learned
    # a cold sync, then one a step: TRL's versions are the engine's
    assert trainer.model_version == worker.engine.policy_version == 4
    assert not worker.engine.gate.paused
    journal = read_policy_journal(tmp_path / "logs")
    assert journal is not None
    # each sync held the proxies from its pause until TRL's new version was set
    assert [e.event for e in journal if e.event != "version"] == [
        "pause", "idle", "resume"
    ] * 4  # fmt: skip
    assert {e.version for e in journal if e.event == "version"} == {1, 2, 3, 4}
    with pytest.raises(RuntimeError, match="is not running"):
        worker.check_health(60)  # the trainer stopped it at train end

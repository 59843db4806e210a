"""Groups: a task's finished rollouts, their rewards and their token samples.

A rollout's samples are the rows ``contagent export --format tokens --filter all``
writes for it, made by the export's own code (:func:`~contagent.exporters.export.export_rollout`)
from its raw log and ``result.json``, so an export of the same log dir gives the
same samples and ``validate`` proves them. A group's advantages are the export's, over
the group's own rollouts; the samples too far off-policy are dropped as the trainer
takes the group.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from contagent.errors import ContagentError
from contagent.export.derive import RolloutExport
from contagent.export.exporter import ExportOptions, export_rollout, group_table_of, read_rollout
from contagent.layout import RolloutPaths, RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rules.groups import GroupFacts
from contagent.runner.config import FINISHED_STATUSES

#: Retries of reading a finished rollout's log while its compaction swaps the files.
_READ_TRIES = 3


@dataclass(frozen=True)
class RolloutOutcome:
    """One rollout of a group, as it last ended."""

    rollout_id: str
    result: RolloutResult
    attempts: int
    """Runs it took: 1, plus one per ``infra_error`` retried."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Its token samples (the tokens format's rows), before the off-policy filter."""
    no_samples: str | None = None
    """Why it gives no samples (the export's reason), when it gives none."""
    read: RolloutExport | None = field(default=None, repr=False, compare=False)
    """Its raw log read and derived as it ended (:func:`read_finished`), until its group
    is built: only the group's formatting is left for the group's end."""

    @property
    def reward(self) -> float | None:
        return self.result.reward


@dataclass(frozen=True)
class Group:
    """A task's ``group_size`` rollouts, delivered once the last of them ended."""

    group_id: int
    task: str
    agent: str
    rollouts: list[RolloutOutcome]
    """Every rollout that reached a verdict, in rollout order."""
    failed: list[RolloutOutcome]
    """Rollouts still in ``infra_error`` after the retries: the group is short by these."""
    samples: list[dict[str, Any]]
    """The samples delivered: every rollout's, less those with no token to train and those
    dropped as off-policy."""
    dropped_untrainable: int
    """Samples with no token on their mask (:func:`trainable`), left out of ``samples``."""
    dropped_off_policy: int
    """Samples older than ``max_off_policy_steps`` allows, left out of ``samples``."""
    policy_version: int
    """The engine's policy version when the trainer took the group."""
    finished_at: float
    """Unix time the group's last rollout was seen finished."""

    @property
    def complete(self) -> bool:
        return not self.failed

    @property
    def rewards(self) -> list[float | None]:
        return [r.reward for r in self.rollouts]


def export_options(config_options: ExportOptions | None = None) -> ExportOptions:
    """The export options samples are made with: the tokens format, every rollout."""
    return replace(config_options or ExportOptions(), formats=("tokens",), filter="all")


def read_finished(paths: RolloutPaths, options: ExportOptions) -> RolloutExport:
    """A finished rollout's raw log read and its row derived, by the export's code."""
    for attempt in range(_READ_TRIES):
        try:
            return read_rollout(paths, options)
        except (ContagentError, OSError):
            # its compaction may have renamed the log under the reader: read it again
            if attempt == _READ_TRIES - 1:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def rollout_samples(
    paths: RolloutPaths,
    options: ExportOptions,
    group: GroupFacts | None,
    read: RolloutExport | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A finished rollout's token samples, as the export writes them, or why it gives none."""
    done = export_rollout(paths, options, group, read or read_finished(paths, options))
    batch = done.batches.get("tokens")
    if batch is not None and batch.num_rows:
        return batch.to_pylist(), None
    row = done.row
    kinds = (row.get("tokens") or {}).get("kinds") or row.get("not_ready_kinds") or []
    return [], done.left_out.get("tokens") or ", ".join(kinds) or "no token samples"


def trainable(sample: dict[str, Any]) -> bool:
    """Whether a sample has a token to train: none is on the mask of one whose own steps a
    grammar constrained throughout (unless ``train_constrained``) or sampled nothing. Such a
    sample costs a trainer a forward and a batch slot and moves no weight."""
    return any(sample["mask"])


def oldest_version(sample: dict[str, Any]) -> int | None:
    """The oldest policy version among a sample's sampled tokens; None when unknown."""
    versions = sample.get("policy_versions")
    if not versions:
        return None
    own = [v for v, m in zip(versions, sample["mask"], strict=True) if m and v is not None]
    return min(own) if own else None


def off_policy_filter(
    samples: list[dict[str, Any]], current: int, max_steps: int | None
) -> tuple[list[dict[str, Any]], int]:
    """(the samples kept, how many were dropped): a sample is dropped when its oldest
    sampled token is more than ``max_steps`` versions behind ``current``, or its versions
    are not known (a bound that cannot be checked fails closed)."""
    if max_steps is None:
        return samples, 0
    kept = []
    for sample in samples:
        oldest = oldest_version(sample)
        if oldest is not None and current - oldest <= max_steps:
            kept.append(sample)
    return kept, len(samples) - len(kept)


def build_group(
    group_id: int,
    task: str,
    agent: str,
    outcomes: list[RolloutOutcome],
    paths: RunPaths,
    options: ExportOptions,
    version: int,
) -> Group:
    """A group from its rollouts' outcomes (in rollout order): the finished ones with
    their samples (their advantages over these rollouts, by the export's own grouping),
    the others ``failed``; nothing filtered yet."""
    failed = [o for o in outcomes if o.result.status not in FINISHED_STATUSES]
    folders = [paths.rollout(o.rollout_id) for o in outcomes]
    table = group_table_of(folders, options.tokens)  # the export's groups and advantages
    finished = []
    for outcome, folder in zip(outcomes, folders, strict=True):
        if outcome.result.status in FINISHED_STATUSES:
            facts = table.get(folder.rollout_id)
            samples, why = rollout_samples(folder, options, facts, outcome.read)
            finished.append(replace(outcome, samples=samples, no_samples=why, read=None))
    return Group(
        group_id=group_id,
        task=task,
        agent=agent,
        rollouts=finished,
        failed=failed,
        samples=[s for o in finished for s in o.samples],
        dropped_untrainable=0,
        dropped_off_policy=0,
        policy_version=version,
        finished_at=time.time(),
    )

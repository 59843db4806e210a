"""Tokens: token-exact samples for RL trainers, one row per sample.

The first columns are prime-rl's ``TrainingSample`` fields (``token_ids``, ``mask``,
``logprobs``, ``temperatures``, ``env_name``, ``advantages``), with its names and types;
beside them, what names the sample, its group and reward, and how it was sampled. Every token is one the inference server reported, at
the position it reported: see :mod:`contagent.rules.token_samples` for how samples are cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.version import schema_metadata
from contagent.rules.groups import GroupFacts
from contagent.rules.rl import model_kinds, rl_left_out
from contagent.rules.token_samples import Sample, sample_tokens, selected_for_tokens

#: prime-rl's ``TrainingSample`` fields the rows carry, with its names and types.
TRAINING_SAMPLE_FIELDS = ("token_ids", "mask", "logprobs", "temperatures", "env_name", "advantages")

TOKENS_SCHEMA = pa.schema(
    [
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("mask", pa.list_(pa.bool_()), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("temperatures", pa.list_(pa.float32()), nullable=False),
        pa.field("env_name", pa.string(), nullable=False),
        pa.field("advantages", pa.list_(pa.float32()), nullable=False),
        pa.field("constrained", pa.list_(pa.bool_()), nullable=False),
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("branch", pa.int32(), nullable=False),
        pa.field("sample", pa.int32(), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("group_size", pa.int32(), nullable=False),
        pa.field("group_complete", pa.bool_(), nullable=False),
        pa.field("passed", pa.bool_()),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("not_ready_kinds", pa.list_(pa.string()), nullable=False),
        pa.field("sampling_modified", pa.bool_(), nullable=False),
        pa.field("logprobs_mode", pa.string()),
        pa.field("experiment", pa.string()),
        pa.field("model", pa.string()),
        pa.field("num_steps", pa.int32(), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
        pa.field("num_sampled", pa.int32(), nullable=False),
        pa.field("policy_versions", pa.list_(pa.int32())),
    ],
    metadata=schema_metadata("tokens"),
)

#: The schema of each older version of the records whose tokens columns differ from
#: :data:`TOKENS_SCHEMA`, so that a folder written then still reads. Version 2 ends with
#: ``policy_spans`` (bool): a step of the sample ended under a newer policy version than it
#: started with. Such a step gives its rollout no samples (``bad_tokens``), so the column
#: could only be false or null, and version 3 dropped it. validate reads it without comparing
#: it: a true one came from such a step, so that rollout's row and records already differ
#: from their rebuild.
OLDER_TOKENS_SCHEMAS: Mapping[int, pa.Schema] = {
    2: TOKENS_SCHEMA.append(pa.field("policy_spans", pa.bool_())),
}

COLUMN_DOCS: dict[str, str] = {
    "token_ids": "The sample's tokens: its last step's prompt token ids followed by the ids "
    "it sampled, exactly as the inference server reported them.",
    "mask": "True on the tokens the model sampled in this sample's own steps, less those a "
    "grammar constrained (unless exported with --train-constrained); false on prompt tokens "
    "and on steps shared with an earlier sample (trained there).",
    "logprobs": "The sampler's logprob of each token sampled in the sample's own steps; "
    "0 elsewhere.",
    "temperatures": "Per token, the temperature of the step that added it (never NaN: a "
    "rollout with a step whose temperature is not known gives no samples).",
    "env_name": "The experiment the rollout ran (empty when unknown).",
    "advantages": "Per token, the rollout's advantage where mask is true, 0 elsewhere.",
    "constrained": "True on the sampled tokens a grammar shaped: all a step sampled under a "
    "named or `required` tool_choice, a response_format, structured_outputs or (processed "
    "logprobs) logit_bias; the tool-call spans under strict tools and `auto`.",
    "rollout_id": "The rollout the sample comes from.",
    "branch": "0-based branch of the rollout (as in the SFT formats).",
    "sample": "0-based sample within the branch: a new one starts where the prompt tokens "
    "stop extending the previous step's.",
    "reward": "Reward of the rollout.",
    "advantage": "The rollout's advantage: its reward against its group's (--advantage).",
    "group_id": "The rollout's group: the attempts at one task with one model (JSON list).",
    "group_size": "Attempts of the group that count (with a reward, no infra_error).",
    "group_complete": "False when a rollout left the group (infra_error, or no reward).",
    "passed": "Whether the rollout passed its evaluation, when known.",
    "truncated": "The rollout was cut (iteration limit, timeout or a cut last step).",
    "not_ready_kinds": "The model's own mistakes the rollout holds (e.g. bad_tool_arguments): "
    "kinds that keep it out of the SFT formats but not out of RL.",
    "sampling_modified": "A parameter that changes the sampled distribution (temperature "
    "other than 1, top_p, top_k, min_p, a penalty, logit_bias) was active, or not known, "
    "in one of the sample's own steps.",
    "logprobs_mode": "The server's logprobs mode for the sample's own steps (raw_logprobs or "
    "processed_logprobs); null when not recorded or not one for all of them.",
    "experiment": "Experiment name.",
    "model": "Model that sampled the tokens.",
    "num_steps": "Steps (LLM calls) whose sampled tokens this sample holds as its own.",
    "num_tokens": "Length of token_ids.",
    "num_sampled": "Tokens with mask true.",
    "policy_versions": "Per token, the policy version its step was sampled under: the one "
    "current when the step's request went upstream and when it ended (a step that ran across "
    "a weight update gives its rollout no samples). Null when the log was recorded without "
    "versions (not by a rollout engine).",
}

USAGE = """\
### prime-rl

The first six columns are prime-rl's `TrainingSample` fields, with its names and types, so a
row becomes one sample with no glue (`advantages` already holds the group-relative advantage;
the export needs `--filter all` so that failed rollouts are here too):

```python
from datasets import load_dataset
from prime_rl.transports.rollouts.types import TrainingSample

ds = load_dataset("ORG/NAME", split="train")  # or the local folder's path
samples = [TrainingSample(**{f: row[f] for f in TrainingSample.__struct_fields__ if f in row})
           for row in ds]
```

- `mask` leaves out the tokens a grammar constrained (`constrained`), whose logprobs are
  not the model's own.
- `truncated` rollouts are here; mask or drop them as your overlong policy says.

### Other RL trainers

verl, NeMo-RL, slime and agent-lightning take the same aligned lists: `token_ids` as the
input ids, `mask` as the loss (response) mask, `logprobs` as the rollout's old logprobs for
the importance ratio and `advantage` (or `reward` with `group_id`) for the policy gradient.
"""


def _own_sampling(row: dict[str, Any], sample: Sample) -> tuple[bool, str | None]:
    """(``sampling_modified``, ``logprobs_mode``) of the sample's own steps."""
    entries = {s["exchange_index"]: s for s in (row.get("tokens") or {}).get("sampling") or []}
    own = [entries[s.index] for s in sample.own if s.index in entries]
    modes = {e["logprobs_mode"] for e in own}
    mode = next(iter(modes)) if len(modes) == 1 else None
    return any(e["modified"] for e in own) or len(own) < len(sample.own), mode


def sample_record(
    row: dict[str, Any], sample: Sample, group: GroupFacts, train_constrained: bool
) -> dict[str, Any]:
    tokens = sample_tokens(sample, group.advantage, train_constrained)
    modified, mode = _own_sampling(row, sample)
    return {
        "token_ids": tokens.token_ids,
        "mask": tokens.mask,
        "logprobs": tokens.logprobs,
        "temperatures": tokens.temperatures,
        "env_name": row.get("experiment") or "",
        "advantages": tokens.advantages,
        "constrained": tokens.constrained,
        "rollout_id": row["rollout_id"],
        "branch": sample.branch,
        "sample": sample.sample,
        "reward": row.get("reward"),
        "advantage": group.advantage,
        "group_id": group.group_id,
        "group_size": group.group_size,
        "group_complete": group.group_complete,
        "passed": row.get("passed"),
        "truncated": row["truncated"],
        "not_ready_kinds": model_kinds(row) or [],
        "sampling_modified": modified,
        "logprobs_mode": mode,
        "experiment": row.get("experiment"),
        "model": row.get("model"),
        "num_steps": len(sample.own),
        "num_tokens": len(tokens.token_ids),
        "num_sampled": sum(tokens.mask),
        "policy_versions": tokens.policy_versions,
    }


ABOUT = """\
Token-exact reinforcement-learning data exported by contagent {version} from recorded
coding-agent rollouts. Each row is one **sample**: a run of a branch's LLM calls in which each
prompt's token ids extend the previous prompt's ids and the ids the model sampled, as the
inference server reported them, with the sampler's logprobs on the sampled tokens. Nothing is
re-tokenized: where a prompt stops extending the tokens before it, a new sample starts."""


class Tokens:
    """The ``tokens`` format (see the module docstring)."""

    name = "tokens"
    title = "contagent tokens (RL)"
    schema = TOKENS_SCHEMA
    older_schemas = OLDER_TOKENS_SCHEMAS
    column_docs = COLUMN_DOCS
    usage = USAGE
    about = ABOUT
    rows_are = "token samples"
    key_columns: tuple[str, ...] = ("branch", "sample")
    column_notes = (
        "The per-token lists `token_ids`, `mask`, `logprobs`, `temperatures`, `advantages` and "
        "`constrained` all have the length `num_tokens`. Nothing is re-tokenized: where a step's prompt tokens "
        "do not extend the previous step's tokens, a new sample starts with that step's prompt."
    )

    def selected(self, row: dict[str, Any], rollout_filter: str) -> bool:
        return selected_for_tokens(row, rollout_filter)

    def left_out(self, row: dict[str, Any], data: RolloutData) -> str | None:
        # no tool list needed (the prompt ids are the server's); a reward and logprobs of
        # the sampled distribution are
        return rl_left_out(row, data.token_options)

    def records(self, row: dict[str, Any], data: RolloutData) -> list[dict[str, Any]]:
        if data.tokens is None:
            return []
        if data.group is None:
            raise ValueError("the rollout's group is not known")
        train = data.token_options.train_constrained
        return [sample_record(row, sample, data.group, train) for sample in data.tokens.samples]

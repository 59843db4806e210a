"""Tokens: token-exact samples for RL trainers, one row per sample.

The columns are those of prime-rl's ``TrainingSample`` (``token_ids``, ``mask``,
``logprobs``, ``temperatures``, ``env_name``, ``reward``) plus what names the sample
and says how it was sampled. Every token is one the inference server reported, at
the position it reported: see :mod:`contagent.rules.token_samples` for how samples are cut.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.version import schema_metadata
from contagent.rules.token_samples import Sample, sample_tokens, selected_for_tokens

TOKENS_SCHEMA = pa.schema(
    [
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("mask", pa.list_(pa.bool_()), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("temperatures", pa.list_(pa.float32()), nullable=False),
        pa.field("constrained", pa.list_(pa.bool_()), nullable=False),
        pa.field("env_name", pa.string(), nullable=False),
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("branch", pa.int32(), nullable=False),
        pa.field("sample", pa.int32(), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("passed", pa.bool_()),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("experiment", pa.string()),
        pa.field("model", pa.string()),
        pa.field("num_steps", pa.int32(), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
        pa.field("num_sampled", pa.int32(), nullable=False),
    ],
    metadata=schema_metadata("tokens"),
)

COLUMN_DOCS: dict[str, str] = {
    "token_ids": "The sample's tokens: its last step's prompt token ids followed by the ids "
    "it sampled, exactly as the inference server reported them.",
    "mask": "True exactly on the tokens the model sampled in this sample's steps; false on "
    "prompt tokens and on steps shared with an earlier sample (trained there).",
    "logprobs": "The sampler's logprob of each masked token; 0 elsewhere.",
    "temperatures": "Per token, the temperature of the step that added it: the request's "
    "`temperature`, or NaN when the request set none (the server's default applied).",
    "constrained": "True on the sampled tokens of steps sampled under a grammar (a named or "
    "`required` tool_choice, a strict tool, a JSON response_format, guided decoding).",
    "env_name": "The experiment the rollout ran (empty when unknown).",
    "rollout_id": "The rollout the sample comes from.",
    "branch": "0-based branch of the rollout (as in the SFT formats).",
    "sample": "0-based sample within the branch: a new one starts where the prompt tokens "
    "stop extending the previous step's.",
    "reward": "Reward of the rollout (evaluate.sh verdict), when known.",
    "passed": "Whether the rollout passed its evaluation, when known.",
    "truncated": "The rollout was cut (iteration limit, timeout or a cut last step).",
    "experiment": "Experiment name.",
    "model": "Model that sampled the tokens.",
    "num_steps": "Steps (LLM calls) whose sampled tokens this sample trains.",
    "num_tokens": "Length of token_ids.",
    "num_sampled": "Tokens with mask true.",
}

USAGE = """\
### prime-rl

Each row has the fields of prime-rl's `TrainingSample` (`token_ids`, `mask`, `logprobs`,
`temperatures`, `env_name`, `reward`), aligned per token, so a row becomes one sample as it is.
Compute the advantage from `reward` across the rollouts of a task (the export needs
`--filter all` so that failed rollouts are here too):

```python
from datasets import load_dataset

ds = load_dataset("ORG/NAME", split="train")  # or the local folder's path
row = ds[0]
sample = dict(
    token_ids=row["token_ids"], mask=row["mask"], logprobs=row["logprobs"],
    temperatures=row["temperatures"], env_name=row["env_name"], reward=row["reward"],
)
```

- `temperatures` is NaN where the request set no temperature: the server then used the
  model's generation config. Fill it with that value before training.
- `constrained` marks tokens sampled under a grammar: their logprobs are those of the
  constrained distribution, far from the model's own. Mask them (`mask & ~constrained`) or
  correct for them.
- `truncated` rollouts are here; mask or drop them as your overlong policy says.

### Other RL trainers

verl, NeMo-RL, slime and agent-lightning take the same three aligned lists: `token_ids` as
the input ids, `mask` as the loss (response) mask and `logprobs` as the rollout's old
logprobs for the importance ratio.
"""


def sample_record(row: dict[str, Any], sample: Sample) -> dict[str, Any]:
    tokens = sample_tokens(sample)
    return {
        "token_ids": tokens.token_ids,
        "mask": tokens.mask,
        "logprobs": tokens.logprobs,
        "temperatures": tokens.temperatures,
        "constrained": tokens.constrained,
        "env_name": row.get("experiment") or "",
        "rollout_id": row["rollout_id"],
        "branch": sample.branch,
        "sample": sample.sample,
        "reward": row.get("reward"),
        "passed": row.get("passed"),
        "truncated": row["truncated"],
        "experiment": row.get("experiment"),
        "model": row.get("model"),
        "num_steps": len(sample.own),
        "num_tokens": len(tokens.token_ids),
        "num_sampled": sum(tokens.mask),
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
    column_docs = COLUMN_DOCS
    usage = USAGE
    about = ABOUT
    rows_are = "token samples"
    key_columns: tuple[str, ...] = ("branch", "sample")
    column_notes = (
        "The per-token lists `token_ids`, `mask`, `logprobs`, `temperatures` and `constrained` "
        "all have the length `num_tokens`. Nothing is re-tokenized: where a step's prompt tokens "
        "do not extend the previous step's tokens, a new sample starts with that step's prompt."
    )

    def selected(self, row: dict[str, Any], rollout_filter: str) -> bool:
        return selected_for_tokens(row, rollout_filter)

    def left_out(self, row: dict[str, Any], data: RolloutData) -> str | None:
        return None  # token samples need no tool list: the prompt ids are the server's

    def records(self, row: dict[str, Any], data: RolloutData) -> list[dict[str, Any]]:
        if data.tokens is None:
            return []
        return [sample_record(row, sample) for sample in data.tokens.samples]

"""The text of a dataset card: YAML metadata from ``datasets``' own writers, then prose.

The YAML (``configs``, ``dataset_info`` with features and splits) is produced by the
same classes ``datasets.Dataset.push_to_hub`` uses, so the Hub and ``load_dataset``
read it exactly as they read a card that ``datasets`` wrote itself.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from datasets import DatasetInfo, Features, SplitDict, SplitInfo
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData

from contagent.exporters.prime_sft_schema import COLUMN_DOCS
from contagent.exporters.summary import ExportSummary

TAGS = ["contagent", "agent-trajectories", "tool-calling", "sft", "code"]
TASK_CATEGORIES = ["text-generation"]


def card_data(
    schema: pa.Schema, *, num_rows: int, num_bytes: int, download_size: int, data_files: str
) -> DatasetCardData:
    """The card's YAML metadata: default config with a ``train`` split over ``data_files``."""
    splits = SplitDict()
    splits.add(SplitInfo(name="train", num_bytes=num_bytes, num_examples=num_rows))
    info = DatasetInfo(
        features=Features.from_arrow_schema(schema),
        splits=splits,
        download_size=download_size,
        dataset_size=num_bytes,
    )
    data = DatasetCardData(
        license="other",
        task_categories=TASK_CATEGORIES,
        tags=TAGS,
        pretty_name="contagent Prime-SFT",
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)
    MetadataConfigs(
        {"default": {"data_files": [{"split": "train", "path": data_files}]}}
    ).to_dataset_card_data(data)
    return data


def render_card(
    summary: ExportSummary,
    schema: pa.Schema,
    *,
    num_rows: int,
    num_shards: int,
    num_bytes: int,
    download_size: int,
    data_files: str,
    charts: list[tuple[str, str]] | None = None,
) -> str:
    """The whole ``README.md``: front matter and body (``charts``: (title, relative path))."""
    data = card_data(
        schema,
        num_rows=num_rows,
        num_bytes=num_bytes,
        download_size=download_size,
        data_files=data_files,
    )
    body = _body(summary, schema, num_rows=num_rows, num_shards=num_shards)
    if charts:
        pictures = "\n\n".join(f"![{_cell(title)}]({path})" for title, path in charts)
        body = body.replace("\n## Columns\n", f"\n## Charts\n\n{pictures}\n\n## Columns\n", 1)
    return str(DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}"))


def _cell(value: Any) -> str:
    """One Markdown table cell: no pipes or newlines from user-given names break the table."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _counts(counts: dict[str, int], what: str) -> str:
    if not counts:
        return f"None: no {what}."
    return _table(("Reason", "Count"), sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) if names else "(not recorded)"


def _tokens(summary: ExportSummary) -> str:
    usage = summary.tokens
    rows: list[tuple[Any, ...]] = []
    for label, counts in (
        ("billed", usage.billed),
        ("selected", usage.selected),
        ("excluded", usage.excluded),
    ):
        rows.append(
            (
                label,
                f"{counts.prompt_tokens:,}",
                f"{counts.completion_tokens:,}",
                f"{counts.total_tokens:,}",
            )
        )
    return _table(("Tokens", "Prompt", "Completion", "Total"), rows)


def _columns(schema: pa.Schema) -> str:
    rows = [
        (
            f"`{f.name}`",
            f"`{f.type}`",
            "no" if not f.nullable else "yes",
            COLUMN_DOCS.get(f.name, ""),
        )
        for f in schema
    ]
    return _table(("Column", "Arrow type", "Nullable", "Description"), rows)


def _body(summary: ExportSummary, schema: pa.Schema, *, num_rows: int, num_shards: int) -> str:
    rate = summary.pass_rate
    pass_rate = f"{rate:.1%}" if rate is not None else "n/a (no rollouts)"
    overview = _table(
        ("", ""),
        [
            ("Rows (conversation branches)", f"{num_rows:,} in {num_shards} Parquet shard(s)"),
            ("Rollouts read", f"{summary.rollouts_read:,}"),
            ("Training-ready rollouts", f"{summary.training_ready:,}"),
            ("Rollouts with rows here", f"{summary.rollouts_written:,}"),
            ("Passed rollouts", f"{summary.passed:,} (pass rate {pass_rate})"),
            (
                "Exchanges read / steps selected",
                f"{summary.exchanges_read:,} / {summary.steps_selected:,}",
            ),
            ("Repairs (merged tool-output fragments)", f"{summary.repairs:,}"),
            ("Models", _names(summary.models)),
            ("Experiments", _names(summary.experiments)),
        ],
    )
    options = json.dumps(summary.options, indent=2, sort_keys=True, default=str)
    return f"""# contagent Prime-SFT dataset

Supervised fine-tuning data exported by contagent
{summary.contagent_version} from recorded coding-agent rollouts. Each row is one conversation
**branch** of a training-ready rollout that passed the export filter: the exchanges the agent
actually used, merged into OpenAI-format messages with tool calls, plus the tool definitions the
model saw. A rollout whose history was rewritten (for example condensed) yields several branches.

## What is in it

{overview}

### Rollouts not training-ready, by reason

{_counts(summary.not_ready_reasons, "rollout was set aside")}

### Exchanges excluded from rows, by reason

{_counts(summary.exclusions, "exchange was excluded")}

### Tokens

Billed tokens are every exchange's usage; selected ones are the exchanges kept in rows;
excluded ones the rest (`selected + excluded == billed`).

{_tokens(summary)}

## Columns

{_columns(schema)}

Unset message fields are null (for example `tool_calls` on a user message); `tools` is a JSON
string so that every row has the same type whatever the tools' schemas.

## Loading

Replace `ORG/NAME` with this dataset's id, or pass the folder's path to load a local copy.

```python
from datasets import load_dataset

ds = load_dataset("ORG/NAME", split="train")
```

### prime-rl

prime-rl's SFT trainer reads the `messages` column and the JSON `tools` column as they are:

```toml
[data]
name = "ORG/NAME"
splits = ["train"]
```

### TRL

`SFTTrainer` takes a dataset with a `messages` column; parse `tools` and drop unset fields so
that chat templates see the shapes they expect:

```python
import json
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

def to_trl(row):
    messages = [{{k: v for k, v in m.items() if v is not None}} for m in row["messages"]]
    return {{"messages": messages, "tools": json.loads(row["tools"])}}

ds = load_dataset("ORG/NAME", split="train")
ds = ds.map(to_trl, remove_columns=ds.column_names)
trainer = SFTTrainer(model="Qwen/Qwen3-0.6B", train_dataset=ds, args=SFTConfig(output_dir="out"))
```

Parsed `tools` become one Arrow column, so every row's tool definitions must share a shape
(they do when the rollouts ran with the same agent); otherwise parse them in your collator.

## How it was made

Exported with contagent {summary.contagent_version} and these options:

```json
{options}
```
"""

"""The text of a dataset card: YAML metadata as ``datasets`` writes it, then prose.

The YAML (``configs``, ``dataset_info`` with features and splits) has the form
``datasets.Dataset.push_to_hub`` gives it, so the Hub and ``load_dataset`` read it
exactly as they read a card that ``datasets`` wrote itself (``Json`` features
included); it is computed from the Arrow schema (:mod:`contagent.export.hub_meta`)
without importing ``datasets``. The body is a list of sections (:data:`SECTIONS`);
add one by appending a function of :class:`CardContext`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from contagent.export.export_summary import ExportSummary
from contagent.export.formats import Format
from contagent.export.hub_meta import features_yaml

TAGS = ["contagent", "agent-trajectories", "tool-calling", "sft", "code"]
TASK_CATEGORIES = ["text-generation"]
LICENSE_NAME = "rollout-terms"
"""The data's terms are those of the model and tasks that produced it; the card says so."""
LICENSE_LINK = "README.md"

# The Hub's size buckets (number of rows), smallest first.
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))
_SIZES_LARGE = (
    (10**7, "1M<n<10M"),
    (10**8, "10M<n<100M"),
    (10**9, "100M<n<1B"),
    (10**10, "1B<n<10B"),
    (10**11, "10B<n<100B"),
    (10**12, "100B<n<1T"),
)


@dataclass(frozen=True)
class CardFacts:
    """What the shards hold, measured after they were written."""

    num_rows: int
    num_shards: int
    num_bytes: int
    """Arrow bytes of the loaded ``train`` split, computed as ``datasets`` computes them."""
    download_size: int
    data_files: str
    charts: tuple[tuple[str, str], ...] = ()
    """(title, path relative to the folder) of each chart image the card shows."""


@dataclass(frozen=True)
class CardContext:
    summary: ExportSummary
    fmt: Format
    facts: CardFacts


def size_category(num_rows: int) -> str:
    for bound, name in (*_SIZES, *_SIZES_LARGE):
        if num_rows < bound:
            return name
    return "n>1T"


def card_data(fmt: Format, facts: CardFacts, license: str | None = None) -> dict[str, Any]:
    """The card's YAML metadata: default config with a ``train`` split over ``data_files``,
    keyed and ordered as ``huggingface_hub``'s ``DatasetCardData`` writes them.

    ``license``: the Hub license id the publisher chose; None declares ``other`` with the
    terms stated in the card.
    """
    data: dict[str, Any] = {
        "license": license or "other",
        "size_categories": [size_category(facts.num_rows)],
        "task_categories": TASK_CATEGORIES,
        "pretty_name": fmt.title,
        "license_name": None if license else LICENSE_NAME,
        "license_link": None if license else LICENSE_LINK,
        "tags": TAGS,
        "dataset_info": {
            "features": features_yaml(fmt.schema),
            "splits": [
                {"name": "train", "num_bytes": facts.num_bytes, "num_examples": facts.num_rows}
            ],
            "download_size": facts.download_size,
            "dataset_size": facts.num_bytes,
        },
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": "train", "path": facts.data_files}],
            }
        ],
    }
    return {key: value for key, value in data.items() if value is not None}


def render_card(summary: ExportSummary, fmt: Format, facts: CardFacts) -> str:
    """The whole ``README.md``: front matter and body."""
    data = card_data(fmt, facts, _chosen_license(summary))
    front = yaml.dump(data, sort_keys=False, allow_unicode=True).strip()
    context = CardContext(summary, fmt, facts)
    parts = (section(context).strip() for section in SECTIONS)
    body = "\n\n".join(part for part in parts if part) + "\n"
    return f"---\n{front}\n---\n\n{body}"


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


def _columns(fmt: Format) -> str:
    rows = [
        (
            f"`{f.name}`",
            f"`{f.type}`",
            "no" if not f.nullable else "yes",
            fmt.column_docs.get(f.name, ""),
        )
        for f in fmt.schema
    ]
    return _table(("Column", "Arrow type", "Nullable", "Description"), rows)


def _intro(c: CardContext) -> str:
    return f"""# {c.fmt.title} dataset

{c.fmt.about.format(version=c.summary.contagent_version)}"""


def _contents(c: CardContext) -> str:
    summary, facts = c.summary, c.facts
    rate = summary.pass_rate
    pass_rate = f"{rate:.1%}" if rate is not None else "n/a (no rollouts)"
    overview = _table(
        ("", ""),
        [
            (
                f"Rows ({c.fmt.rows_are})",
                f"{facts.num_rows:,} in {facts.num_shards} Parquet shard(s)",
            ),
            ("Rollouts read", f"{summary.rollouts_read:,}"),
            ("Training-ready rollouts", f"{summary.training_ready:,}"),
            ("Rollouts with rows here", f"{summary.format_rollouts.get(c.fmt.name, 0):,}"),
            *(
                (f"Left out here: {kind}", f"{n:,}")
                for kind, n in sorted(summary.left_out.get(c.fmt.name, {}).items())
            ),
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
    return f"""## What is in it

{overview}

### Rollouts not training-ready, by reason

{_counts(summary.not_ready_reasons, "rollout was set aside")}

### Exchanges excluded from rows, by reason

{_counts(summary.exclusions, "exchange was excluded")}

### Tokens

Billed tokens are every exchange's usage; selected ones are the exchanges kept in rows;
excluded ones the rest (`selected + excluded == billed`).

{_tokens(summary)}"""


def _charts(c: CardContext) -> str:
    if not c.facts.charts:
        return ""
    pictures = "\n\n".join(f"![{_cell(title)}]({path})" for title, path in c.facts.charts)
    return f"## Charts\n\n{pictures}"


def _column_section(c: CardContext) -> str:
    return f"""## Columns

{_columns(c.fmt)}

{c.fmt.column_notes}"""


def _loading(c: CardContext) -> str:
    return f"""## Loading and training

Replace `ORG/NAME` with this dataset's id, or pass the folder's path to load a local copy.

```python
from datasets import load_dataset

ds = load_dataset("ORG/NAME", split="train")
```

{c.fmt.usage}"""


def _chosen_license(summary: ExportSummary) -> str | None:
    license = summary.options.get("license")
    return license if isinstance(license, str) else None


def _license(c: CardContext) -> str:
    license = _chosen_license(c.summary)
    if license is None:
        return """## License

The conversations were produced by a model working on tasks; their terms of use are those of
that model's provider and of the tasks' sources. Whoever publishes this dataset states them
here."""
    return f"""## License

Released by its publisher under `{license}` (see
https://huggingface.co/docs/hub/repositories-licenses). The conversations were produced by a
model working on tasks, so the terms of that model's provider and of the tasks' sources apply
as well."""


def _provenance(c: CardContext) -> str:
    options = json.dumps(c.summary.options, indent=2, sort_keys=True, default=str)
    return f"""## How it was made

Exported with contagent {c.summary.contagent_version} and these options:

```json
{options}
```"""


SECTIONS: list[Callable[[CardContext], str]] = [
    _intro,
    _contents,
    _charts,
    _column_section,
    _loading,
    _license,
    _provenance,
]
"""The card's body, in order."""

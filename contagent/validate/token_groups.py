"""The tokens folder's groups and options, rebuilt for its check.

A token record's advantage and group columns depend on every rollout of the export, and
its mask and selection on the options the export ran with. The options are read from the
shards (each records them); the groups are rebuilt from each row's verdict with the rule
the exporter uses (:func:`contagent.rules.groups.group_table`).
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow.parquet as pq

from contagent.errors import ContagentError
from contagent.export.formats.folder import read_dataset_folder
from contagent.export.formats.rollout_data import RolloutData
from contagent.layout import ExportPaths
from contagent.rules.groups import attempt_of, group_table
from contagent.rules.rl import TOKENS_OPTIONS_KEY, TokenOptions

Problem = tuple[str | None, str]


def shard_options(paths: ExportPaths) -> tuple[TokenOptions | None, list[Problem]]:
    """The options the tokens shards record: one set for all, or a problem."""
    try:
        folder = read_dataset_folder(paths.format_folder("tokens").root)
    except ContagentError:
        return None, []  # the folder check says what is wrong with it
    found: set[bytes | None] = set()
    for shard in folder.shards:
        meta = pq.read_schema(shard).metadata or {}
        found.add(meta.get(TOKENS_OPTIONS_KEY))
    if not found:
        return TokenOptions(), []
    options = {TokenOptions.read(raw) for raw in found}
    if len(options) != 1 or None in options:
        return None, [(None, "tokens/: shards do not record one set of token options")]
    (chosen,) = options
    return chosen, []


def with_groups(data: dict[str, RolloutData], options: TokenOptions) -> dict[str, RolloutData]:
    """Each rollout's data with its group and the export's options."""
    attempts = [attempt_of(rid, d.verdict, options.group_by) for rid, d in data.items()]
    table = group_table(attempts, options.advantage)
    return {rid: replace(d, group=table[rid], token_options=options) for rid, d in data.items()}

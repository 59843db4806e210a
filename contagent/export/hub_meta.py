"""The dataset card's Hub metadata, computed from the Arrow schema alone.

``datasets`` writes a card's ``dataset_info`` from its ``Features``; importing it
costs most of a small export's time. These functions give the same YAML from the
Arrow schema, following ``datasets.Features.from_arrow_schema`` and its YAML form
(a test holds them to ``datasets``' own output), and the ``train`` split's
``num_bytes`` as ``datasets`` counts it when it loads the shards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from contagent.errors import ContagentError

_PLAIN = {
    "null": pa.types.is_null,
    "bool": pa.types.is_boolean,
    "int8": pa.types.is_int8,
    "int16": pa.types.is_int16,
    "int32": pa.types.is_int32,
    "int64": pa.types.is_int64,
    "uint8": pa.types.is_uint8,
    "uint16": pa.types.is_uint16,
    "uint32": pa.types.is_uint32,
    "uint64": pa.types.is_uint64,
    "float16": pa.types.is_float16,
    "float32": pa.types.is_float32,
    "float64": pa.types.is_float64,
    "string": pa.types.is_string,
    "large_string": pa.types.is_large_string,
    "binary": pa.types.is_binary,
    "large_binary": pa.types.is_large_binary,
    "date32": pa.types.is_date32,
    "date64": pa.types.is_date64,
}


def features_yaml(schema: pa.Schema) -> list[dict[str, Any]]:
    """``dataset_info.features`` of a card for Parquet of ``schema`` (``datasets``' YAML form)."""
    return [{"name": field.name, **_feature(field.type)} for field in schema]


def _feature(t: pa.DataType) -> dict[str, Any]:
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, **_feature(f.type)} for f in t]}
    if pa.types.is_fixed_size_list(t):
        return {"list": _listed(_feature(t.value_type)), "length": t.list_size}
    if pa.types.is_list(t):
        return {"list": _listed(_feature(t.value_type))}
    if pa.types.is_large_list(t):
        return {"large_list": _listed(_feature(t.value_type))}
    if pa.types.is_dictionary(t):  # datasets reads the values
        return _feature(t.value_type)
    if isinstance(t, pa.JsonType):  # datasets' Json feature
        return {"dtype": "json"}
    return {"dtype": _dtype(t)}


def _listed(inner: dict[str, Any]) -> Any:
    """A list's element as ``datasets`` writes it: a bare dtype or a struct's fields."""
    if list(inner) == ["dtype"]:
        return inner["dtype"]
    if list(inner) == ["struct"]:
        return inner["struct"]
    return inner


def _dtype(t: pa.DataType) -> str:
    for name, test in _PLAIN.items():
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    if pa.types.is_time32(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return f"{str(t).split('[')[0]}[{t.unit}]"
    if pa.types.is_decimal(t):
        return f"decimal{t.bit_width}({t.precision}, {t.scale})"
    raise ContagentError(f"no dataset-card feature for the Arrow type {t}")


def arrow_bytes(shards: tuple[Path, ...] | list[Path]) -> int:
    """The ``train`` split's ``num_bytes`` as ``datasets`` computes it when it loads the shards.

    ``datasets`` reads each row group in batches of the first row group's size and sums
    the tables' ``nbytes`` once each is made one chunk; so does this.
    """
    total = 0
    for shard in shards:
        with pq.ParquetFile(shard) as parquet:
            for group in range(parquet.num_row_groups):
                size = parquet.metadata.row_group(group).num_rows
                for batch in parquet.iter_batches(batch_size=max(size, 1), row_groups=[group]):
                    total += pa.Table.from_batches([batch]).combine_chunks().nbytes
    return total

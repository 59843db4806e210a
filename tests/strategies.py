"""Hypothesis strategies that the readers' property tests share."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(
    max_leaves: int = 10, max_size: int = 3, text_size: int | None = None
) -> st.SearchStrategy[Any]:
    """Any JSON value a serialiser writes (integers within 64 bits, as orjson takes them;
    no NaN): scalars, and lists and objects of at most ``max_size`` items nesting them."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=text_size)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=max_size)
            | st.dictionaries(st.text(max_size=text_size), inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )

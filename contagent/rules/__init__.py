"""The selection rules, as pure functions: no IO, no logging, no state.

The exporter uses them to build rows and the validator uses them to check
rows. Keep every rule here, so that the two can never disagree;
:mod:`contagent.wire.chat` only reads fields out of messages and responses. The one
judgement the recorder shares, :func:`completeness` (an outcome's ``completed``
or ``incomplete``), is defined beside the records and re-exported here.

The rules live in three modules by scope (:mod:`.messages`, :mod:`.selection`,
:mod:`.rollout_level`), the request-history scan in :mod:`.history` and the tools the model saw
in :mod:`.rendered_tools`; every name is
importable from here.
"""

from contagent.rawlog.records import completeness
from contagent.rules.history import (
    Problem,
    Scan,
    history_keys,
    merge_tool_fragments,
    scan_request,
    tool_protocol_problems,
)
from contagent.rules.messages import (
    TERMINAL_TOOLS,
    ExcludedReason,
    Key,
    NotReadyKind,
    apply_reasoning_policy,
    branch_tools,
    carries,
    consumption_key,
    extends,
    has_think_conflict,
    is_safe,
    response_problems,
    tool_union,
)
from contagent.rules.rendered_tools import (
    UNRENDERABLE_TOOL,
    TrainerTools,
    Unrenderable,
    callable_names,
    rendered_tools,
    trainer_tools,
)
from contagent.rules.rollout_level import (
    accounting_problems,
    final_cut,
    rollout_truncation,
    selected_for_training,
)
from contagent.rules.selection import (
    Decision,
    View,
    classify,
    consumption,
    is_chat_route,
    select,
)

__all__ = [
    "TERMINAL_TOOLS",
    "UNRENDERABLE_TOOL",
    "Decision",
    "ExcludedReason",
    "Key",
    "NotReadyKind",
    "Problem",
    "Scan",
    "TrainerTools",
    "Unrenderable",
    "View",
    "accounting_problems",
    "apply_reasoning_policy",
    "branch_tools",
    "callable_names",
    "carries",
    "classify",
    "completeness",
    "consumption",
    "consumption_key",
    "extends",
    "final_cut",
    "has_think_conflict",
    "history_keys",
    "is_chat_route",
    "is_safe",
    "merge_tool_fragments",
    "rendered_tools",
    "response_problems",
    "rollout_truncation",
    "scan_request",
    "select",
    "selected_for_training",
    "tool_protocol_problems",
    "tool_union",
    "trainer_tools",
]

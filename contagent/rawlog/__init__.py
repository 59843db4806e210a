"""The raw log and its readers: what a rollout folder holds, as the recorder and the runner wrote it.

:mod:`.records` (the request and outcome records of ``exchanges.jsonl``), :mod:`.result`
(``result.json``), :mod:`.read` (reading both, plain or compacted), :mod:`.stream` (the
record stream of either form, a chunk at a time), :mod:`.resent` (the request history an
agent resends) and :mod:`.compact` (``exchanges.jsonl.zst``).
"""

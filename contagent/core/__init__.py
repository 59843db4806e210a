"""The export core: the results row (:mod:`.rows`) and the conversation branches of a
rollout (:mod:`.trajectory`), which the exporter, the validator and the viewer share."""

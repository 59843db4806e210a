"""Exporting: raw exchange logs -> ``results.jsonl`` (:mod:`.derive`) and one folder per training
format (:mod:`.formats`), written by :mod:`.exporter` with the dataset card."""

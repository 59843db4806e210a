"""Charts of an export: :mod:`.export_charts` (the charts as data, SVG for the viewer) and
:mod:`.png` (the dataset card's PNG, drawn with Pillow)."""

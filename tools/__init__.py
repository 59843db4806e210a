"""Tools of this repository, not shipped in the wheel: the sample rollouts' generators
(``python -m tools.samples data/rollouts``), the builder they and the tests share, the
fidelity cases, the schema writer and a local multi-node Ray cluster for tests and benchmarks."""

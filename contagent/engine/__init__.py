"""A live rollout engine: ``contagent run``'s machinery, driven by a trainer.

A trainer starts an engine once, submits tasks with a group size, and takes
*groups* as they finish: the rollouts of one task with their rewards and their
token samples (the ``--format tokens`` columns, derived from each finished
rollout's raw log by the export's own code, with advantages and policy
versions)::

    from contagent.engine import Engine, EngineConfig

    async with Engine(EngineConfig(run=run_config, max_off_policy_steps=1)) as engine:
        await engine.submit(["exp_001", "exp_002"], group_size=4)
        async for group in engine.groups():
            train(group.samples)
            engine.set_policy_version(engine.policy_version + 1)

docs/engine.md describes the API, the versions, pausing and backpressure.
"""

from contagent.engine.engine import Engine
from contagent.engine.engine_config import EngineConfig
from contagent.engine.group_build import Group, RolloutOutcome

__all__ = ["Engine", "EngineConfig", "Group", "RolloutOutcome"]

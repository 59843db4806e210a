"""The runner stage: experiments in Docker with a headless agent, every LLM call recorded.

Library entry points (``contagent/cli/run_cmd.py`` and ``engine_cmd.py`` are thin wrappers):

* :func:`contagent.runner.run.run_experiments` runs a :class:`~contagent.runner.config.RunConfig`;
* :func:`contagent.runner.stopping.leftovers.gc` removes one owner's leftovers of dead runs;
* :func:`contagent.runner.images.build.build_image` builds an agent's runner image.

Nothing here imports an agent: each agent is a module of :mod:`contagent.agents`, and
``agent_main.py`` runs it inside the container.
"""

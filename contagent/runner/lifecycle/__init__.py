"""The rollout lifecycle: a rollout's plan and context (:mod:`.rollout`), the one lifecycle
every task kind's rollout runs through (:mod:`.rollout_lifecycle`), and the program and
sandbox inside its containers."""

"""The rollout lifecycle: a rollout's plan and context (:mod:`.rollout`), how each kind's
rollout runs, and the program and sandbox inside its containers."""

"""``contagent view``: a local, read-only web app over an export or a run's log dir."""

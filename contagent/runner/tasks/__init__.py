"""Task kinds: the seed experiment and the Harbor task, and the one table that picks a folder's kind
(:mod:`.kinds`)."""

"""contagent: turn coding-agent runs into training data people can trust."""

__version__ = "0.1.0"

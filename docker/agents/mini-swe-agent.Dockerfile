# The mini-swe-agent runner image: Python 3 with the pinned mini-swe-agent in /opt/venv.
#
#   docker build -f docker/agents/mini-swe-agent.Dockerfile -t contagent-runner-mini-swe-agent:latest docker/
#   contagent build --agent mini-swe-agent                    (same, through the docker SDK)
#
# Build arguments and the CA bundle option: as for docker/Dockerfile.
ARG BASE_IMAGE=python:3.13-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    MSWEA_COST_TRACKING=ignore_errors

# Evaluate scripts commonly use git, curl, ps.
RUN if ! command -v git >/dev/null || ! command -v curl >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends git curl procps ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi

COPY agents/mini-swe-agent.lock /opt/contagent/requirements.lock
COPY ca-bundle/ /opt/contagent/ca-bundle/
RUN python3 -m venv /opt/venv \
    && if [ -s /opt/contagent/ca-bundle/ca.crt ]; then export PIP_CERT=/opt/contagent/ca-bundle/ca.crt; fi \
    && /opt/venv/bin/pip install --no-cache-dir -r /opt/contagent/requirements.lock \
    && rm -rf /opt/contagent/ca-bundle \
    && /opt/venv/bin/python -c 'import minisweagent; print("mini-swe-agent", minisweagent.__version__)'

LABEL contagent.runner-image="1" contagent.agent="mini-swe-agent"
COPY entrypoint.sh /opt/contagent/entrypoint.sh
RUN chmod 0755 /opt/contagent/entrypoint.sh && mkdir -p /root/workspace
WORKDIR /root/workspace
ENTRYPOINT ["/opt/contagent/entrypoint.sh"]

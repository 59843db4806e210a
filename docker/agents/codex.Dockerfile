# The Codex CLI runner image: Node from Debian, the pinned @openai/codex from the npm registry.
#
#   docker build -f docker/agents/codex.Dockerfile -t contagent-runner-codex:latest docker/
#   contagent build --agent codex                             (same, through the docker SDK)
#
# Build arguments and the CA bundle option: as for docker/Dockerfile (npm trusts it for the
# install step only). CODEX_VERSION: the @openai/codex release to install.
ARG BASE_IMAGE=python:3.13-slim
FROM ${BASE_IMAGE}
ARG CODEX_VERSION=0.171.0

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Node runs the codex launcher; evaluate scripts commonly use git, curl, ps. npm is needed only
# to install codex: it and its ~300 dependencies are purged in the same layer (about 300 MB).
COPY ca-bundle/ /opt/contagent/ca-bundle/
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs npm git curl procps ca-certificates \
    && if [ -s /opt/contagent/ca-bundle/ca.crt ]; then export NODE_EXTRA_CA_CERTS=/opt/contagent/ca-bundle/ca.crt; fi \
    && npm install -g --no-audit --no-fund "@openai/codex@${CODEX_VERSION}" \
    && npm cache clean --force \
    && apt-get purge -y npm && apt-get autoremove -y --purge \
    && rm -rf /var/lib/apt/lists/* /opt/contagent/ca-bundle /root/.npm \
    && codex --version \
    && python3 -m venv --without-pip /opt/venv

LABEL contagent.runner-image="1" contagent.agent="codex"
COPY entrypoint.sh /opt/contagent/entrypoint.sh
RUN chmod 0755 /opt/contagent/entrypoint.sh && mkdir -p /root/workspace
WORKDIR /root/workspace
ENTRYPOINT ["/opt/contagent/entrypoint.sh"]

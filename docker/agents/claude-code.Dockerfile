# The Claude Code runner image: the pinned @anthropic-ai/claude-code from the npm registry.
#
#   docker build -f docker/agents/claude-code.Dockerfile -t contagent-runner-claude-code:latest docker/
#   contagent build --agent claude-code                       (same, through the docker SDK)
#
# Build arguments and the CA bundle option: as for docker/Dockerfile (npm trusts it for the
# install step only). CLAUDE_CODE_VERSION: the @anthropic-ai/claude-code release to install.
#
# The npm package is a wrapper: the program is the native (Bun-compiled, glibc-linked) binary of
# its optional dependency @anthropic-ai/claude-code-linux-x64. Only that binary is kept; Node and
# npm are purged in the same layer, since nothing runs on Node at run time.
ARG BASE_IMAGE=python:3.13-slim
FROM ${BASE_IMAGE}
ARG CLAUDE_CODE_VERSION=2.1.332

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Claude Code's Bash tool runs bash; evaluate scripts commonly use git, curl, ps.
COPY ca-bundle/ /opt/contagent/ca-bundle/
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs npm bash git curl procps ca-certificates \
    && if [ -s /opt/contagent/ca-bundle/ca.crt ]; then export NODE_EXTRA_CA_CERTS=/opt/contagent/ca-bundle/ca.crt; fi \
    && mkdir /tmp/claude-code \
    && npm install --prefix /tmp/claude-code --no-audit --no-fund --ignore-scripts \
         "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
    && install -m 0755 /tmp/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude \
         /usr/local/bin/claude \
    && rm -rf /tmp/claude-code /root/.npm \
    && apt-get purge -y nodejs npm && apt-get autoremove -y --purge \
    && rm -rf /var/lib/apt/lists/* /opt/contagent/ca-bundle \
    && claude --version \
    && python3 -m venv --without-pip /opt/venv

LABEL contagent.runner-image="1" contagent.agent="claude-code"
COPY entrypoint.sh /opt/contagent/entrypoint.sh
RUN chmod 0755 /opt/contagent/entrypoint.sh && mkdir -p /root/workspace
WORKDIR /root/workspace
ENTRYPOINT ["/opt/contagent/entrypoint.sh"]

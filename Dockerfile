# Toolcore's image: one image for the web processes (daphne) and the tool workers
# (runworker_tools). docs/deployment.md says how compose.yaml and systemd use it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DATA_DIR=/srv/toolcore/data \
    TOOLCORE_WORKSPACE_ROOT=/srv/toolcore/workspaces

# tini is PID 1: it reaps the orphans of the commands that `bash` calls and launches run (a
# killed command's children are otherwise left as zombies) and passes SIGTERM on.
# postgresql-client: pg_dump and pg_restore for deploy/backup.sh and deploy/restore.sh.
# bubblewrap: the sandbox of every command (docs/security.md, "The command sandbox").
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini postgresql-client bubblewrap \
    && rm -rf /var/lib/apt/lists/*

# A dedicated user: commands run in their sandbox as the server's OS user, whose only writable
# places are DATA_DIR and the workspace root (docs/deployment.md, "Security").
RUN useradd --system --uid 10001 --user-group --home-dir /srv/toolcore --no-create-home toolcore \
    && mkdir -p /srv/toolcore/data /srv/toolcore/workspaces \
    && chown -R toolcore:toolcore /srv/toolcore

WORKDIR /app
COPY pyproject.toml README.md manage.py ./
COPY config ./config
COPY conversations ./conversations
COPY tools ./tools
COPY projections ./projections
COPY templates ./templates
COPY static ./static
COPY deploy ./deploy
# Editable: the settings find templates/ and static/ beside config/ (BASE_DIR), so the code
# must run from /app, whatever the working directory of the command.
RUN pip install -e . && python -m compileall -q config conversations tools projections

USER toolcore
EXPOSE 8000
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["daphne", "-e", "tcp:port=8000:interface=0.0.0.0:backlog=1024", "--proxy-headers", "config.asgi:application"]

# One image for every Habitus role; the command picks the role:
#   habitus migrate                 one-shot schema migration (run before the services)
#   habitus serve gateway           HTTP API on $HABITUS_HTTP_PORT (8080)
#   habitus serve <service>         a bus service; /metrics, /healthz, /readyz on $HABITUS_METRICS_PORT (9000)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    HABITUS_DATA_DIR=/var/lib/habitus \
    HABITUS_KEYSTORE_DIR=/var/lib/habitus-keys \
    HABITUS_HTTP_HOST=0.0.0.0 \
    HABITUS_HTTP_PORT=8080 \
    HABITUS_METRICS_PORT=9000

# A fixed numeric uid, so Kubernetes can verify runAsNonRoot without a runAsUser override.
RUN groupadd --system --gid 10001 habitus \
 && useradd --system --uid 10001 --gid habitus --home-dir /var/lib/habitus --shell /usr/sbin/nologin habitus \
 && mkdir -p /var/lib/habitus /var/lib/habitus-keys \
 && chown habitus:habitus /var/lib/habitus \
 && chown habitus:habitus /var/lib/habitus-keys && chmod 700 /var/lib/habitus-keys

WORKDIR /opt/habitus
COPY . .
# Runtime dependencies only (no dev extras). The BuildKit cache mount keeps rebuilds after a
# code change from downloading every wheel again.
# The compiler and OpenSSL's headers build the compiled envelope (setup.py) and go again; the
# image keeps only the OpenSSL library it links.
RUN --mount=type=cache,target=/root/.cache/pip \
    apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev libssl-dev \
 && pip install . \
 && python -c "import habitus.crypto._envelope" \
 && apt-get purge -y --auto-remove gcc libc6-dev libssl-dev \
 && apt-get install -y --no-install-recommends libssl3 \
 && rm -rf /var/lib/apt/lists/* build *.egg-info

USER 10001:10001
WORKDIR /var/lib/habitus
EXPOSE 8080 9000

ENTRYPOINT ["habitus"]
CMD ["serve", "gateway"]

# The AgentBeats green agent as the platform runs it by default: every row graded in its
# instance image through Amber's Docker gateway (framework.docker). No build toolchain and
# no interpreters (git only: the bundled sample benchmark's repositories are made with it);
# the Verified dataset inside, so that every shard grades the same rows (pinned by the
# image's digest). Debian's Python 3.11 and the packages of the one lock that
# the serve path needs (container/requirements-docker.lock, written by
# scripts/container_lock.sh with container/requirements.lock's versions).
#
# From a clean clone, with Debian's mirror, PyPI and the Hugging Face hub reachable:
#   docker build --network host -f container/green-docker.Dockerfile -t swegreen-green-docker .
# Without the hub: put the dataset at container/dataset/swebench_verified.jsonl (not
# committed) and add --build-arg DATASET_SOURCE=context; the image then records that file's
# sha256 and no hub revision. The engine's image (builds environments itself):
# container/Dockerfile.
FROM debian:bookworm-slim AS slim-python
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      python3.11 python3.11-venv ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
COPY container/ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt

# The virtualenv is made here and copied whole into the image: pip, the dataset's reader
# and the build's caches stay behind.
FROM slim-python AS slim-build
WORKDIR /opt/swegreen
COPY container/requirements-docker.lock ./
RUN python3.11 -m venv /opt/swegreen/venv \
 && /opt/swegreen/venv/bin/pip install --no-cache-dir --quiet --no-deps -r requirements-docker.lock
COPY pyproject.toml README.md ./
COPY shared ./shared
RUN /opt/swegreen/venv/bin/pip install --no-cache-dir --quiet --no-deps . \
 && /opt/swegreen/venv/bin/python -m pip uninstall --quiet -y pip setuptools \
 && find /opt/swegreen/venv -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/swegreen/venv/bin/python -m compileall -q -j 0 /opt/swegreen/venv/lib >/dev/null
# The dataset: the hub's parquet at DATASET_REVISION, read by a throwaway pyarrow (never in
# the image), written as JSON lines with what it is (container/dataset_snapshot.py).
ARG DATASET_SOURCE=hub
ARG DATASET=SWE-bench/SWE-bench_Verified
ARG DATASET_REVISION=main
COPY container/dataset/ /tmp/dataset-context/
COPY container/dataset_snapshot.py /tmp/
RUN set -e; mkdir -p /opt/swegreen/datasets; \
    if [ "$DATASET_SOURCE" = hub ]; then \
      python3.11 -m venv /tmp/hubvenv \
      && /tmp/hubvenv/bin/pip install --no-cache-dir --quiet "huggingface_hub>=0.24" "pyarrow>=15" \
      && /tmp/hubvenv/bin/python /tmp/dataset_snapshot.py hub "$DATASET" "$DATASET_REVISION" /opt/swegreen/datasets; \
    else \
      python3.11 /tmp/dataset_snapshot.py file "$DATASET" /tmp/dataset-context/swebench_verified.jsonl /opt/swegreen/datasets; \
    fi; \
    cat /opt/swegreen/datasets/index.json

FROM slim-python AS green-docker
ARG SANDBOX_UID=10001
# The user, and the directory Amber's helper makes the framework.docker socket in: the
# helper runs as this user and binds the socket itself before the program starts, so the
# directory must be the user's (a root-owned /var/run ends the helper: no agent card).
RUN groupadd --gid "$SANDBOX_UID" swegreen \
 && useradd --uid "$SANDBOX_UID" --gid "$SANDBOX_UID" --create-home --shell /usr/sbin/nologin swegreen \
 && mkdir -p /var/cache/swegreen /var/lib/swegreen/results /run/swegreen \
 && chown "$SANDBOX_UID:$SANDBOX_UID" /var/cache/swegreen /var/lib/swegreen/results /run/swegreen
COPY --from=slim-build /opt/swegreen/venv /opt/swegreen/venv
COPY --from=slim-build /opt/swegreen/datasets /opt/swegreen/datasets
ENV PATH=/opt/swegreen/venv/bin:$PATH \
    SWEGREEN_CACHE_DIR=/var/cache/swegreen \
    SWEGREEN_OUTPUT_DIR=/var/lib/swegreen/results \
    SWEGREEN_DATASET_SNAPSHOTS=/opt/swegreen/datasets \
    SWEGREEN_ENVIRONMENTS=docker \
    DOCKER_HOST=unix:///run/swegreen/docker.sock \
    HOME=/home/swegreen
USER $SANDBOX_UID:$SANDBOX_UID
EXPOSE 9009
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s CMD ["/opt/swegreen/venv/bin/python", \
  "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:9009/.well-known/agent-card.json', timeout=4)"]
ENTRYPOINT ["/opt/swegreen/venv/bin/swegreen", "serve"]
CMD ["--host", "0.0.0.0", "--port", "9009"]

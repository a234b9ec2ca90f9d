# rebound container image: compiled on Debian 12, run on Debian 12 slim with only the shared
# libraries the binary links (libssl3, libyaml-cpp0.7, libspdlog1.10 -> libfmt9, libsqlite3-0,
# libpq5, libnghttp2-14, libprometheus-cpp-core1.0; libstdc++6 and libgcc-s1 are already in the base) and the CA
# bundle, as uid 10001. The HEALTHCHECK is `rebound health`: no curl in the image.
#
#   docker build -t rebound .                  (podman: podman build --format docker -t rebound .)
#   docker run --rm -p 3128:3128 -p 9901:9901 rebound
#   curl -x http://127.0.0.1:3128 http://example.com/
#
# scripts/oci-check builds and checks this image with podman on a Debian 12 host (CI runs it).
ARG BUILD_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
# The list of scripts/install-deps, minus what only tests and developers use (GoogleTest,
# curl, python3, the PostgreSQL server).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build ccache libboost1.81-dev libssl-dev libyaml-cpp-dev libspdlog-dev libsqlite3-dev \
      libpq-dev prometheus-cpp-dev pkg-config libnghttp2-dev libc-ares-dev \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
# Release (-O3) by default; `--build-arg CMAKE_BUILD_TYPE=RelWithDebInfo` builds what
# scripts/build builds (-O2; the debug info is stripped below).
ARG CMAKE_BUILD_TYPE=Release
WORKDIR /src
COPY . .
# A ccache cache mount (BuildKit, and buildah/podman): a rebuild after a source change compiles
# only what changed instead of every file at -O3; nothing of it lands in the image. Paths are
# hashed relative to /src, as scripts/build does.
ENV CCACHE_DIR=/var/cache/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1
RUN --mount=type=cache,target=/var/cache/ccache \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE} \
      -DREBOUND_BUILD_TESTS=OFF -DREBOUND_BUILD_BENCH=OFF \
 && cmake --build build --target rebound \
 && ccache -s | head -4 \
 && strip --strip-unneeded build/rebound \
 && build/rebound --version

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libssl3 libyaml-cpp0.7 libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libsqlite3-0 libpq5 libnghttp2-14 libc-ares2 ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --gid 10001 rebound \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin rebound \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/rebound
# Handed-over calls (async delivery) live in /var/lib/rebound/rebound.db: mount a volume there
# so they outlive the container.
VOLUME /var/lib/rebound
COPY --from=build /src/build/rebound /usr/local/bin/rebound
COPY docker/rebound.yaml /etc/rebound/rebound.yaml
USER 10001:10001
EXPOSE 3128 9901
# SIGTERM: rebound fails /readyz, stops accepting, finishes in-flight requests within
# drain_timeout and exits 0.
STOPSIGNAL SIGTERM
# Asks the admin listener of the config the image runs (0.0.0.0:9901 is asked on 127.0.0.1).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["rebound", "health", "--config", "/etc/rebound/rebound.yaml"]
CMD ["rebound", "--config", "/etc/rebound/rebound.yaml"]

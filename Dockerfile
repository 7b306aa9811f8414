# kerf's controller image: `kerf controller` on a distroless base, as non-root 65532.
#
#   docker build -t ghcr.io/kerf/kerf:0.1.0 .
#   docker push ghcr.io/kerf/kerf:0.1.0
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 -t IMAGE --push .
# (docs/install.md, "Build the image").

# Build stage: the workspace's toolchain (rust-version 1.94) and a locked release build.
FROM rust:1.94-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake clang \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kerf-cli \
    && install -D -m 0755 target/release/kerf /out/kerf

# Run stage: distroless "cc" (glibc and libgcc, no shell, no package manager). The fully
# static base would need a musl build of aws-lc-sys and mimalloc; the cc variant keeps the
# same hardening with the toolchain the build stage already has.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kerf" \
      org.opencontainers.image.description="Drop-in replacement for the Karpenter controller (core + AWS provider, API v1)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kerf/kerf"
COPY --from=build /out/kerf /usr/local/bin/kerf
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/kerf", "controller"]

# syntax=docker/dockerfile:1
#
# The policyhost operator image: one static (musl) binary on a distroless
# base, running as a non-root user.
#
#   docker build -t ghcr.io/policyhost/policyhost:0.1.0 .
#
# The build stage runs `cargo xtask static`, the same command that builds the
# same binary without Docker (tests/all/image.rs keeps the two in sync).

# The workspace's rust-version (Cargo.toml).
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
# musl-tools: the C compiler for the crates with C parts (ring, mimalloc);
# `cargo xtask static` would install both itself, here they are cached layers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo xtask static

# No shell, no package manager: CA certificates, /etc/passwd with `nonroot`
# (65532), and the binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/policyhost /policyhost
# The same user deploy/deployment.yaml runs as (runAsUser/runAsGroup).
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/policyhost"]
CMD ["run"]

# syntax=docker/dockerfile:1
# raygate's image: a static (musl) binary on distroless/static, running as the unprivileged
# user 65532, with nothing to write on the root filesystem (the Deployment mounts it read-only).
# TLS is rustls: no OpenSSL, no libc at run time. The binary is the controller build (no
# simulator: `--no-default-features`, as hack/build-image.sh's daemonless OCI archive).
#
#   docker build -t registry.example.com/raygate:v0.1.0 .
#
# tests/deploy_manifests.rs checks that this file's runtime user, entrypoint and default
# arguments agree with config/manager/deployment.yaml and the Helm chart.

# --- build: Rust on Alpine targets musl and links statically by default -----------------------
FROM rust:1.95-alpine AS build
# ring (rustls' crypto) compiles C and assembly.
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p raygate-cli --no-default-features --bin raygate \
    && cp target/release/raygate /raygate \
    && strip /raygate

# --- runtime: no shell, no package manager, CA certificates and /etc/passwd only --------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /raygate /raygate
# distroless' "nonroot" user, by number so `runAsNonRoot` can verify it.
USER 65532:65532
ENTRYPOINT ["/raygate"]
CMD ["controller"]

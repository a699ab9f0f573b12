# syntax=docker/dockerfile:1
# yh-genie: one static binary (musl, no libc needed on the host it is copied to) in an empty image.
# The DaemonSet runs `yh-genie install`, which copies this same binary into the host's CNI bin dir.
#
#   docker build -t yh-genie:0.1.0 .

# Alpine's native Rust target is *-linux-musl, and musl binaries are statically linked by default,
# so this builds for whatever architecture the builder runs on. Keep the tag >= rust-version.
FROM rust:1.89-alpine AS build
# ring (rustls' crypto) compiles C and assembly.
RUN apk add --no-cache musl-dev gcc
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds; the binary is copied out of the
# cached target dir because cache mounts are not part of the image. The readelf check refuses to
# ship a binary that would need a dynamic loader on the host.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin yh-genie \
    && cp target/release/yh-genie /yh-genie \
    && ! readelf -l /yh-genie | grep -q INTERP

FROM scratch
COPY --from=build /yh-genie /usr/local/bin/yh-genie
ENTRYPOINT ["/usr/local/bin/yh-genie", "install"]

# yh-genie: one static binary (the C library linked in: nothing needed on the host it is copied to)
# in an empty image. The DaemonSet runs `yh-genie install`, which copies this same binary into the
# host's CNI bin dir.
#
#   docker build -t yh-genie:0.2.0 .
#
# Needs BuildKit (Docker's default builder since 23.0; on 20.10, DOCKER_BUILDKIT=1) for the cache
# mounts below.

# Alpine's Rust image links against musl. Where Alpine's packages cannot be fetched, a Debian-based
# Rust image builds the same static binary against glibc:
#   docker build --build-arg RUST_IMAGE=rust:1.89-bookworm -t yh-genie:0.2.0 .
# Keep the tag >= rust-version.
ARG RUST_IMAGE=rust:1.89-alpine
FROM ${RUST_IMAGE} AS build
# ring (rustls' crypto) compiles C and assembly: Alpine's Rust image has no C compiler, Debian's has.
RUN if command -v apk >/dev/null; then apk add --no-cache musl-dev gcc; fi
WORKDIR /src
COPY . .
# Built for the image's own platform (its host triple), named explicitly so that the static C
# runtime asked for applies to yh-genie alone and not to the build scripts and proc-macros the
# compiler loads (glibc's target cannot build those statically). Cache mounts keep the registry
# and target dir between builds; the binary is copied out of the cached target dir because cache
# mounts are not part of the image. The readelf check refuses to ship a binary that would need a
# dynamic loader on the host.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target=$(rustc -vV | sed -n 's/^host: //p') \
    && RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked --bin yh-genie --target "$target" \
    && cp "target/$target/release/yh-genie" /yh-genie \
    && ! readelf -l /yh-genie | grep -q INTERP

FROM scratch
COPY --from=build /yh-genie /usr/local/bin/yh-genie
ENTRYPOINT ["/usr/local/bin/yh-genie", "install"]

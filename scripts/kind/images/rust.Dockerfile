# The stand-in for the Rust image the repository's Dockerfile builds on, where that image and
# Alpine's packages cannot be fetched: Debian's C toolchain (ring compiles C), and the Rust toolchain
# of the machine running the build (cargo, rustc and the standard library for its own platform)
# where the official images keep it, without rustup; it trusts the certificate authorities that
# machine trusts.
ARG BASE
FROM ${BASE}
COPY toolchain/ /usr/local/rustup/toolchains/local/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /usr/local/cargo/bin \
    && ln -s /usr/local/rustup/toolchains/local/bin/cargo /usr/local/rustup/toolchains/local/bin/rustc \
      /usr/local/rustup/toolchains/local/bin/rustdoc /usr/local/cargo/bin/ \
    && cargo --version && rustc --version

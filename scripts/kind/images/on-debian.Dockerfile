# A program on one of the Debian root filesystems scripts/kind/binaries.sh makes: kube-proxy and
# flanneld on the one with the netfilter tools they run (Kubernetes' and flannel's own images put
# them on distroless-iptables and Alpine).
ARG BASE
FROM ${BASE}
ARG DEST
COPY program ${DEST}

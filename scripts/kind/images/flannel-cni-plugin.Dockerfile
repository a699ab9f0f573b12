# flannel's CNI plugin and the bridge plugin it delegates to, at / as flannel's own flannel-cni-plugin
# image has its plugin, for e2e/flannel-cni.yaml's install-cni-plugin to copy to the node; on a
# Debian root filesystem for its `cp` (flannel's image is Alpine's).
ARG BASE
FROM ${BASE}
COPY flannel bridge /

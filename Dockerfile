# egressd in one small image: the static egressd binary and nothing else. It runs as any role
# (`egressd run --roles …`, deploy/kubernetes) and as `egressd forward-proxy`, the proxies the
# kubernetes provider starts (docs/providers/kubernetes.md, "The image"). `make image` builds
# the binary (CGO off, so it needs no libc) and then this file, with docker, podman or
# buildah, whichever is there; no Go toolchain image and no registry are needed.
# No CA bundle: NATS's CA comes from EGRESSD_NATS_CA (a mounted Secret), and the forward
# proxy tunnels TLS without looking into it. Mount one if an OTLP endpoint needs it.
FROM scratch
COPY bin/image/egressd /egressd
# Not root: the proxies bind ports of 1024 and up, the roles bind nothing below it.
USER 65532:65532
ENTRYPOINT ["/egressd"]

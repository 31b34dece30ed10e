# image: registry.invalid/report-runner-with-baton
#
# A program you cannot change, run under `baton elect` by
# deploy/kubernetes/singleton-wrapper.yaml: your own image with baton's
# static binary copied in from the released image. Replace the second FROM
# and the /app lines with your program's.
#
#   docker build -f deploy/container/report-runner.Dockerfile -t registry.invalid/report-runner-with-baton:latest .
ARG BATON_IMAGE=ghcr.io/batonhq/baton:v0.1.0
FROM ${BATON_IMAGE} AS baton

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=baton /usr/local/bin/baton /usr/local/bin/baton
# COPY report-runner /app/report-runner
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/baton"]

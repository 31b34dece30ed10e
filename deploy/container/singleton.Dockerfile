# image: registry.invalid/baton-singleton
#
# examples/singleton, the program of deploy/kubernetes/singleton-library.yaml:
# a static binary on distroless's static base, run as the non-root user
# 65532. Build from the repository's root:
#
#   docker build -f deploy/container/singleton.Dockerfile -t registry.invalid/baton-singleton:latest .
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 GOWORK=off go build -trimpath -buildvcs=false -ldflags "-s -w" \
      -o /out/singleton ./examples/singleton

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/singleton /usr/local/bin/singleton
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/singleton"]

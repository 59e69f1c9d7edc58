# syntax=docker/dockerfile:1
#
# kneecap: one static binary on a distroless base, running as non-root.
#   docker build -t kneecap .
#   docker run --rm -p 8080:8080 -p 9090:9090 -e KNEECAP_UPSTREAM=http://engine:8000 kneecap
#
# deploy/dockerfile_test.go runs this file's `go build` line with the same
# environment and flags and checks that the result is a static executable.

FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/kneecap ./cmd/kneecap

# static-debian12 holds CA certificates, /etc/passwd with the nonroot user
# and tzdata, and nothing else: no shell, no libc.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kneecap /kneecap
USER 65532:65532
# Traffic (KNEECAP_LISTEN) and admin (KNEECAP_ADMIN_LISTEN: /metrics,
# /healthz, /readyz, /status, and the live page at /).
EXPOSE 8080 9090
ENTRYPOINT ["/kneecap"]
CMD ["serve"]

# The exchange service image: static Go binaries on distroless (the service, and the MCP gateway at
# /app/gateway), with the standards data the service reads.
#
#   docker build -t exchange:local .
#   docker run --rm -p 8000:8000 exchange:local          # embedded database, keys under /data
#
# docker-compose.yml runs it with MongoDB.

# --- Standards data: scripts/setup downloads the pinned upstream files (no ../shared in a build) ------
FROM node:20-bookworm-slim AS standards
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/setup scripts/setup
RUN scripts/setup

# --- Go build ------------------------------------------------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/exchange ./cmd/exchange \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway \
 && mkdir -p /out/data

# --- Runtime -------------------------------------------------------------------------------------------
FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/exchange /app/exchange
COPY --from=build /out/gateway /app/gateway
COPY --from=standards /src/standards /app/standards
# DATA_DIR holds the generated keys (and the embedded database when MONGODB_URI is unset). A named
# volume mounted here starts with this folder's owner, so the service can write to it.
COPY --from=build --chown=65532:65532 /out/data /data
ENV DATA_DIR=/data
EXPOSE 8000 8401
USER nonroot:nonroot
ENTRYPOINT ["/app/exchange"]
CMD ["serve"]

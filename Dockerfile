# Weft: build the release binary, then run it on a slim Debian image.
FROM rust:1-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked -p weft-cli --bin weft

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --home-dir /app weft \
    && mkdir -p /app/workspace && chown weft /app/workspace
COPY --from=build /src/target/release/weft /usr/local/bin/weft
COPY config /app/config
WORKDIR /app
USER weft
ENV WEFT_BIND=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
CMD ["weft", "serve"]

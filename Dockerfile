# The memplan HTTP service (see README, "HTTP service").
#   docker build -t memplan .
#   docker run --rm -p 8080:8080 -v memplan-data:/data memplan
# Jobs and stored plans live in the SQLite file on the /data volume. SIGTERM (docker stop)
# gives running jobs 5 s, then puts them back in the queue for the next start.

# Builder: HiGHS is compiled from source by highs-sys (cmake, g++; libclang for bindgen).
FROM rust:1.95-bookworm AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake libclang-dev g++ \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p memplan-cli \
    && install -m 0755 target/release/memplan /usr/local/bin/memplan

# Runtime: the binary (statically linked HiGHS and SQLite; libstdc++ for HiGHS).
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends libstdc++6 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data memplan \
    && mkdir -p /data \
    && chown memplan /data
COPY --from=builder /usr/local/bin/memplan /usr/local/bin/memplan
USER memplan
VOLUME ["/data"]
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["memplan"]
# Reachable from outside the container: bearer tokens are required (mount a token file, see
# the README); `memplan serve` refuses a public address without them.
CMD ["serve", "--addr", "0.0.0.0:8080", "--db", "/data/memplan.db", "--shutdown-grace", "5", "--token-file", "/run/secrets/memplan-tokens"]

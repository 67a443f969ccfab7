# Build
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY migrations migrations
COPY config config
RUN cargo build --release --locked --bin dispatch

# Run
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 dispatch
COPY --from=build /src/target/release/dispatch /usr/local/bin/dispatch
COPY config /etc/dispatch
USER dispatch
ENV DISPATCH_SERVER__LISTEN=0.0.0.0:8080 \
    DISPATCH_LOG__FORMAT=json
EXPOSE 8080
ENTRYPOINT ["dispatch"]
CMD ["serve"]

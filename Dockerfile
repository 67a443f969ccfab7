# Build. The dependencies are compiled in a layer of their own, from the
# manifest alone, so that a change to the sources rebuilds only Dispatch.
# The `dist` profile (Cargo.toml) is the release build without the line
# tables that `--release` keeps: the image carries a binary a fraction of
# the size.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --profile dist --locked --bin dispatch \
    && rm -rf src
COPY src src
COPY migrations migrations
COPY config config
# The sources keep their own times, which may be older than the placeholder
# build above: touch them so that cargo builds them.
RUN touch src/main.rs src/lib.rs && cargo build --profile dist --locked --bin dispatch

# Run. The embedded store (the default without DATABASE_URL) writes ./data
# under the working directory, a volume the service's user owns.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/dispatch dispatch \
    && mkdir -p /var/lib/dispatch && chown dispatch /var/lib/dispatch
COPY --from=build /src/target/dist/dispatch /usr/local/bin/dispatch
WORKDIR /var/lib/dispatch
VOLUME /var/lib/dispatch
USER dispatch
ENV DISPATCH_SERVER__LISTEN=0.0.0.0:8080 \
    DISPATCH_LOG__FORMAT=json
EXPOSE 8080
ENTRYPOINT ["dispatch"]
CMD ["serve"]

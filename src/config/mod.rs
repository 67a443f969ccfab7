//! Typed configuration: `config/default.toml` < `--config FILE` < `DISPATCH_<SECTION>__<KEY>`.

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use figment::{
    providers::{Env, Format, Serialized, Toml},
    Figment,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{
    delivery::resolver::Resolver,
    sealing::{Sealer, SealingKey},
};

/// The defaults compiled into the binary, identical to `config/default.toml`,
/// so that the binary runs from any working directory.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub api: ApiConfig,
    pub retry: RetryConfig,
    pub retention: RetentionConfig,
    pub sweeper: SweeperConfig,
    pub webhook: WebhookConfig,
    pub aws: AwsConfig,
    pub log: LogConfig,
    pub portal: PortalConfig,
    #[serde(default)]
    pub secrets: SecretsConfig,
    #[serde(default)]
    pub bulk: BulkConfig,
    #[serde(default)]
    pub schedules: SchedulesConfig,
    /// What one account may hold (docs/api.md#account-limits).
    #[serde(default)]
    pub limits: crate::domain::limits::Limits,
    /// Where the private-network guard looks names up: the system's
    /// resolver. Not read from any file or variable; a test gives a fixed
    /// table here, to judge names by answers it chooses.
    #[serde(skip)]
    pub resolver: Resolver,
}

/// Recurring schedules (docs/api.md#recurring-schedules).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SchedulesConfig {
    /// Runs missed while no instance ran are made up on start when younger
    /// than this; older ones are skipped.
    #[serde(with = "duration")]
    pub catch_up: Duration,
    /// How far ahead of its instant a run's message is created, so that it
    /// is delivered as punctually as any message.
    #[serde(with = "duration")]
    pub ahead: Duration,
    /// Schedules a pass takes in one transaction.
    pub batch_size: u32,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        Self {
            catch_up: Duration::from_secs(3600),
            ahead: Duration::from_secs(5),
            batch_size: 500,
        }
    }
}

/// Bulk redrive, cancel and replay (docs/api.md#bulk-redrive-cancel-and-replay).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct BulkConfig {
    /// A call matching more messages than this answers 400 and changes nothing.
    pub max: u64,
}

impl Default for BulkConfig {
    fn default() -> Self {
        Self { max: 100_000 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    /// Reverse proxies whose `X-Forwarded-For` is believed, for the limits
    /// kept per address and for logs (`limits::client`): CIDRs, or single
    /// addresses.
    #[serde(default, deserialize_with = "cidrs")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// A request's headers must arrive within this, from the connection's
    /// start (the first request) or from their first byte (the next ones).
    #[serde(with = "duration")]
    pub header_timeout: Duration,
    /// A request's body must arrive whole within this, from its headers.
    #[serde(with = "duration")]
    pub body_timeout: Duration,
    /// A keep-alive connection with no request under way closes after this.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Connections served at once; beyond them a connection is answered
    /// for `/health/*` only, and refused when those are many too.
    pub max_connections: usize,
}

/// A list of CIDRs (`10.0.0.0/8`) or addresses (`127.0.0.1`, one host).
fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ipnet::IpNet>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "server.trusted_proxies: {s:?} is not a CIDR or an address"
                    ))
                })
        })
        .collect()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct DatabaseConfig {
    #[serde(default)]
    pub url: String,
    pub max_connections: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct AuthConfig {
    #[serde(with = "duration")]
    pub token_ttl: Duration,
    pub issuer: String,
    pub audience: String,
    #[serde(default)]
    pub external: Option<ExternalIssuerConfig>,
    /// Failed token requests allowed per client id in `token_window` (five
    /// times as many per source address) before 429.
    pub token_attempts: u32,
    #[serde(with = "duration")]
    pub token_window: Duration,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ApiConfig {
    /// Requests a second per client on authenticated endpoints (bursts of
    /// twice that); 0: no limit.
    pub rate_limit: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ExternalIssuerConfig {
    pub issuer: String,
    pub audience: String,
    pub jwks_url: String,
    /// The claim that names the Dispatch account of the token's subject.
    #[serde(default = "default_account_claim")]
    pub account_claim: String,
    /// How long a fetched JWKS is trusted before it is fetched again.
    #[serde(with = "duration", default = "default_jwks_ttl")]
    pub jwks_ttl: Duration,
}

fn default_account_claim() -> String {
    "account".into()
}

fn default_jwks_ttl() -> Duration {
    Duration::from_secs(300)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RetryConfig {
    pub immediate_retries: u32,
    pub minute_rounds: u32,
    pub hour_cycles: u32,
    #[serde(with = "duration")]
    pub minute_delay: Duration,
    #[serde(with = "duration")]
    pub hour_delay: Duration,
    #[serde(with = "duration")]
    pub max_retry_after: Duration,
}

fn thirty_days() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RetentionConfig {
    #[serde(with = "duration")]
    pub delivered: Duration,
    #[serde(with = "duration")]
    pub cancelled: Duration,
    #[serde(with = "duration")]
    pub failed_attempts: Duration,
    #[serde(with = "duration")]
    pub dead_letters: Duration,
    /// The event archive (docs/api.md#events-and-subscriptions): events are
    /// kept this long whatever becomes of their messages.
    #[serde(with = "duration", default = "thirty_days")]
    pub events: Duration,
    #[serde(with = "duration")]
    pub interval: Duration,
    pub batch_size: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SweeperConfig {
    #[serde(with = "duration")]
    pub lease: Duration,
    pub batch_size: u32,
    pub concurrency: u32,
    /// Attempts in flight per target on one instance.
    pub target_concurrency: u32,
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    pub enabled: bool,
    /// Messages that fall due within this long are claimed ahead and held
    /// in memory until their instant (0: each is claimed when due).
    #[serde(with = "duration")]
    pub claim_ahead: Duration,
    /// At most this many messages are held ahead at once.
    pub claim_ahead_max: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct WebhookConfig {
    pub allow_private_networks: bool,
    /// Host names that may resolve to private addresses while every other
    /// address is still judged (a service on the same compose network).
    #[serde(default)]
    pub allow_private_hosts: Vec<String>,
    #[serde(with = "duration")]
    pub timeout: Duration,
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct AwsConfig {
    /// Per-call timeout of SQS SendMessage(Batch) and SNS Publish.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Send messages due together for one SQS queue with SendMessageBatch.
    pub sqs_batch: bool,
    /// Let a target without credentials act with this server's own AWS
    /// identity (the default provider chain). Off: every account brings its own.
    pub allow_default_credentials: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PortalConfig {
    /// How long a sign-in lasts.
    #[serde(with = "duration")]
    pub session_ttl: Duration,
    /// Mark cookies Secure even without `X-Forwarded-Proto: https` from a proxy.
    pub secure_cookies: bool,
    /// Sign-in attempts allowed per email address in `login_window` (five times as many per client address).
    pub login_attempts: u32,
    #[serde(with = "duration")]
    pub login_window: Duration,
}

/// Encryption of target secrets and token-signing keys at rest
/// (docs/operations.md#secrets-at-rest).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct SecretsConfig {
    /// 32 bytes in base64: what new secrets are sealed with.
    #[serde(default)]
    pub encryption_key: Option<KeyText>,
    /// A file holding the base64 text of the key, instead of `encryption_key`.
    #[serde(default)]
    pub encryption_key_file: Option<PathBuf>,
    /// Keys that still open what they sealed, until `dispatch secrets rotate` has run.
    #[serde(default)]
    pub previous_keys: Vec<KeyText>,
}

/// Key material as configured (base64 text). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct KeyText(String);

impl KeyText {
    pub fn new(base64: impl Into<String>) -> Self {
        Self(base64.into())
    }

    fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyText(***)")
    }
}

impl SecretsConfig {
    /// The sealer the configured keys make; None without a current key (an
    /// empty value counts as unset). Reads `encryption_key_file`. An error
    /// names the setting at fault and never repeats its value.
    pub fn sealer(&self) -> Result<Option<Sealer>, ConfigError> {
        let invalid = |key: &str, why: String| ConfigError::Invalid(format!("{key} {why}"));
        let inline = self.encryption_key.as_ref().filter(|k| !k.is_blank());
        let current = match (inline, &self.encryption_key_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid(
                    "set secrets.encryption_key or secrets.encryption_key_file, not both".into(),
                ))
            }
            (Some(k), None) => Some(
                SealingKey::from_base64(&k.0)
                    .map_err(|why| invalid("secrets.encryption_key", why))?,
            ),
            (None, Some(path)) => {
                let key = "secrets.encryption_key_file";
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(key, format!("({}) cannot be read: {e}", path.display()))
                })?;
                Some(
                    SealingKey::from_base64(&text)
                        .map_err(|why| invalid(key, format!("({}) {why}", path.display())))?,
                )
            }
            (None, None) => None,
        };
        let mut previous = Vec::with_capacity(self.previous_keys.len());
        for (i, k) in self.previous_keys.iter().enumerate() {
            previous.push(
                SealingKey::from_base64(&k.0)
                    .map_err(|why| invalid(&format!("secrets.previous_keys[{i}]"), why))?,
            );
        }
        match current {
            Some(current) => Ok(Some(Sealer::new(current, previous))),
            None if previous.is_empty() => Ok(None),
            None => Err(ConfigError::Invalid(
                "secrets.previous_keys needs a current key: set secrets.encryption_key".into(),
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct LogConfig {
    pub format: String,
    pub filter: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads the layered configuration from the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        figment = figment.merge(Env::prefixed("DISPATCH_").split("__"));
        if let Ok(url) = std::env::var("DATABASE_URL") {
            if std::env::var_os("DISPATCH_DATABASE__URL").is_none() {
                figment = figment.merge(Serialized::default("database.url", url));
            }
        }
        let config: Config = figment.extract().map_err(Box::new)?;
        config.validate()?;
        Ok(config)
    }

    /// Where the private-network guard looks names up: `resolver`, with the
    /// names of `webhook.allow_private_hosts` let inside.
    pub fn guard_names(&self) -> Resolver {
        self.resolver
            .clone()
            .allowing_private(&self.webhook.allow_private_hosts)
    }

    /// The defaults alone, for tests and tools that build a config in code.
    pub fn defaults() -> Self {
        Figment::from(Toml::string(DEFAULT_TOML))
            .extract()
            .expect("the compiled-in defaults parse")
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.retry.minute_rounds == 0 || self.retry.hour_cycles == 0 {
            return invalid("retry.minute_rounds and retry.hour_cycles must be at least 1");
        }
        if self.sweeper.batch_size == 0 || self.sweeper.concurrency == 0 {
            return invalid("sweeper.batch_size and sweeper.concurrency must be at least 1");
        }
        // aws.timeout is cut to fit the lease, like a target's timeoutMs.
        if self.sweeper.lease <= self.webhook.timeout {
            return invalid("sweeper.lease must be longer than webhook.timeout");
        }
        if self.portal.login_attempts == 0 || self.portal.login_window.is_zero() {
            return invalid("portal.login_attempts and portal.login_window must be above zero");
        }
        if self.auth.token_attempts == 0 || self.auth.token_window.is_zero() {
            return invalid("auth.token_attempts and auth.token_window must be above zero");
        }
        let server = &self.server;
        if server.header_timeout.is_zero()
            || server.body_timeout.is_zero()
            || server.idle_timeout.is_zero()
            || server.max_connections == 0
        {
            return invalid("server.header_timeout, server.body_timeout, server.idle_timeout and server.max_connections must be above zero");
        }
        if self.retention.batch_size == 0 {
            return invalid("retention.batch_size must be at least 1");
        }
        for host in &self.webhook.allow_private_hosts {
            let name = host.trim().trim_end_matches('.');
            let written_as_address = name.parse::<std::net::IpAddr>().is_ok()
                || (name.starts_with('[') && name.ends_with(']'));
            if name.is_empty()
                || written_as_address
                || name.contains(|c: char| c == ':' || c == '/' || c.is_whitespace())
            {
                return invalid(&format!(
                    "webhook.allow_private_hosts: {host:?} is not a host name (write names such \
                     as \"moto\", without scheme or port; addresses are let through only by \
                     webhook.allow_private_networks)"
                ));
            }
        }
        self.secrets.sealer()?;
        Ok(())
    }
}

/// Durations as human strings: "200ms", "60s", "1h", "7d".
pub mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(s.trim()).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration like 500ms, 60s, 1h, 7d: {e}"
            ))
        })
    }
}

/// The ladder a configuration describes.
impl From<&RetryConfig> for crate::domain::retry::RetryPolicy {
    fn from(c: &RetryConfig) -> Self {
        Self {
            immediate_retries: c.immediate_retries,
            minute_rounds: c.minute_rounds,
            hour_cycles: c.hour_cycles,
            minute_delay: c.minute_delay,
            hour_delay: c.hour_delay,
            max_retry_after: c.max_retry_after,
        }
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment::Error
mod tests;

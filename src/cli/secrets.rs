//! `dispatch secrets rotate`: every secret at rest (target secrets,
//! token-signing keys) encrypted again under the current key.

use anyhow::Context;
use clap::Subcommand;

use super::common::{self, refused};
use crate::config::Config;

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Re-encrypt every stored secret under secrets.encryption_key, while
    /// instances keep serving; then the keys in secrets.previous_keys can go.
    Rotate,
}

pub async fn run(config: Config, command: SecretsCommand) -> anyhow::Result<()> {
    match command {
        SecretsCommand::Rotate => rotate(config).await,
    }
}

async fn rotate(config: Config) -> anyhow::Result<()> {
    let Some(sealer) = config.secrets.sealer()? else {
        anyhow::bail!(
            "secrets rotate needs secrets.encryption_key (or secrets.encryption_key_file): \
             the key to encrypt every stored secret under"
        );
    };
    let current_key = sealer.current_key_id().to_string();
    let done = common::service(config)
        .await?
        .reseal_secrets()
        .await
        .map_err(refused)
        .context("re-encrypting stored secrets")?;
    println!(
        "re-encrypted {} rows under key id {} ({} target secrets, {} token-signing keys)",
        done.targets + done.signing_keys,
        current_key,
        done.targets,
        done.signing_keys
    );
    if done.unsettled > 0 {
        anyhow::bail!(
            "{} rows changed while they were being re-encrypted; is an instance still writing \
             under another key? Give every instance the new key, then run rotate again",
            done.unsettled
        );
    }
    Ok(())
}

//! The rules a target's outbound side must meet before it is stored, the
//! same for every door (the API, the portal, the CLI): each address an
//! account controls passes the private-network guard, and an SQS/SNS target
//! brings its own AWS credentials unless the operator allows the server's.

use super::{guard, resolver::Resolver};
use crate::domain::target::{FieldError, TargetConfig};

#[derive(Debug, Clone)]
pub struct OutboundPolicy {
    pub allow_private_networks: bool,
    pub allow_default_credentials: bool,
    /// Where the guard looks up the names it judges.
    pub names: Resolver,
}

impl OutboundPolicy {
    /// Every problem, each naming its field; never the address a name resolved to.
    pub async fn check(&self, config: &TargetConfig) -> Result<(), Vec<FieldError>> {
        let mut addresses: Vec<(&str, &str)> = Vec::new();
        let mut errors = Vec::new();
        match config {
            TargetConfig::Webhook(w) => {
                addresses.push(("config.url", &w.url));
                if let Some(auth) = &w.auth {
                    addresses.push(("config.auth.tokenUrl", &auth.token_url));
                }
            }
            TargetConfig::Sqs(c) => {
                addresses.extend(c.endpoint_url.as_deref().map(|u| ("config.endpointUrl", u)));
                self.check_credentials(c.credentials.is_some(), &mut errors);
            }
            TargetConfig::Sns(c) => {
                addresses.extend(c.endpoint_url.as_deref().map(|u| ("config.endpointUrl", u)));
                self.check_credentials(c.credentials.is_some(), &mut errors);
            }
            // Dispatch connects nowhere for a pull target.
            TargetConfig::Pull(_) => {}
        }
        if !self.allow_private_networks {
            for (field, url) in addresses {
                if guard::check_url(&self.names, url).await.is_err() {
                    errors.push(FieldError::new(
                        field,
                        "is not a public address (loopback, private, link-local and other \
                         special-purpose networks are refused unless webhook.allow_private_networks \
                         is set or the host is in webhook.allow_private_hosts)",
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn check_credentials(&self, has_credentials: bool, errors: &mut Vec<FieldError>) {
        if !has_credentials && !self.allow_default_credentials {
            errors.push(FieldError::new(
                "config.credentials",
                "is required: this server does not lend its own AWS identity to targets \
                 (aws.allow_default_credentials is false)",
            ));
        }
    }
}

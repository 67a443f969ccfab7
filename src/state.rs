//! What the HTTP doors (the API and the portal) share: the use cases (and
//! through them the reads), and what each door keeps in memory. Neither
//! door imports the other; `app` mounts both.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::{
    auth::tokens::TokenService,
    config::Config,
    limits::{ApiLimits, SignInLimits},
    service::Service,
};

#[derive(Clone)]
pub struct AppState {
    /// Every change goes through a use case, every read through
    /// `Service::reads`, and the readiness probe through `Service::ping`.
    pub service: Service,
    pub tokens: Arc<TokenService>,
    /// Token request failures and request rates, per client and address.
    pub limits: Arc<ApiLimits>,
    /// Portal sign-ins, per email and address.
    pub sign_ins: Arc<SignInLimits>,
    pub config: Arc<Config>,
    pub metrics: PrometheusHandle,
}

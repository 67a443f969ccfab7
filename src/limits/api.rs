//! What the API keeps in memory to resist abuse (docs/api.md#abuse-limits): failed token
//! requests per client id and per source address, and requests per client
//! when `api.rate_limit` is set.

use std::{
    net::IpAddr,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use crate::{
    config::Config,
    limits::{self, FailureLimit, Limiter},
};

pub struct ApiLimits {
    token_clients: FailureLimit<String>,
    /// Several clients may share an address (a NAT, a proxy): five times as many.
    token_addresses: FailureLimit<IpAddr>,
    /// Keyed by account and subject; None when `api.rate_limit` is 0.
    requests: Option<Limiter<(String, String)>>,
    /// The instances serving on the database (`set_instances`): each allows
    /// its part of `api.rate_limit`.
    instances: AtomicU32,
}

impl ApiLimits {
    pub fn new(config: &Config) -> Self {
        let (attempts, window) = (config.auth.token_attempts, config.auth.token_window);
        let rate = config.api.rate_limit;
        Self {
            token_clients: FailureLimit::new(attempts, window),
            token_addresses: FailureLimit::new(attempts.saturating_mul(5), window),
            requests: (rate > 0)
                .then(|| Limiter::new(limits::per_second(rate, rate.saturating_mul(2)))),
            instances: AtomicU32::new(1),
        }
    }

    /// How many instances serve on the database, this one among them.
    pub fn set_instances(&self, n: u32) {
        self.instances.store(n.max(1), Ordering::Relaxed);
    }

    /// How many instances this one counts (`set_instances`).
    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed)
    }

    /// How long token requests from `address` are still held back.
    pub fn token_address_held(&self, address: IpAddr) -> Option<Duration> {
        self.token_addresses.held_back(&address)
    }

    /// How long token requests for `client_id` are still held back.
    pub fn token_client_held(&self, client_id: &str) -> Option<Duration> {
        self.token_clients.held_back(&client_id.to_string())
    }

    /// Counts a failed token request (a client id, when one was given).
    pub fn token_failed(&self, client_id: Option<&str>, address: IpAddr) {
        if let Some(id) = client_id {
            self.token_clients.failed(&id.to_string());
        }
        self.token_addresses.failed(&address);
    }

    /// Counts one API request of a client; refused with how long to wait.
    pub fn request(&self, account: &str, subject: &str) -> Result<(), Duration> {
        match &self.requests {
            None => Ok(()),
            // With N instances behind a balancer, each allows a client
            // 1/N of the rate: each request costs N.
            Some(limiter) => limiter.check_as(
                &(account.to_string(), subject.to_string()),
                self.instances.load(Ordering::Relaxed),
            ),
        }
    }

    /// How many client ids the token limits remember.
    pub fn remembered_token_clients(&self) -> usize {
        self.token_clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(attempts: u32, rate: u32) -> ApiLimits {
        let mut config = Config::defaults();
        config.auth.token_attempts = attempts;
        config.api.rate_limit = rate;
        ApiLimits::new(&config)
    }

    #[test]
    fn a_flood_of_random_client_ids_from_one_address_is_remembered_boundedly() {
        let limits = limits(10, 0);
        let address: IpAddr = "192.0.2.7".parse().unwrap();
        for i in 0..20_000u32 {
            if limits.token_address_held(address).is_some() {
                continue;
            }
            let id = format!("dc_{i:016x}");
            assert!(limits.token_client_held(&id).is_none());
            limits.token_failed(Some(&id), address);
        }
        assert!(limits.token_address_held(address).is_some());
        assert!(
            limits.remembered_token_clients() <= 50,
            "{} client ids remembered",
            limits.remembered_token_clients()
        );
    }

    #[test]
    fn the_address_limit_is_five_times_the_client_limit() {
        let limits = limits(2, 0);
        let address: IpAddr = "192.0.2.8".parse().unwrap();
        for i in 0..9 {
            limits.token_failed(Some(&format!("c{i}")), address);
            assert!(limits.token_address_held(address).is_none(), "after {i}");
        }
        limits.token_failed(Some("c9"), address);
        assert!(limits.token_address_held(address).is_some());
        assert!(limits
            .token_address_held("192.0.2.9".parse().unwrap())
            .is_none());
    }

    #[test]
    fn requests_are_unlimited_at_zero_and_bursts_of_twice_the_rate_otherwise() {
        let unlimited = limits(10, 0);
        assert!((0..1000).all(|_| unlimited.request("a", "c").is_ok()));
        let limited = limits(10, 3);
        assert!((0..6).all(|_| limited.request("a", "c").is_ok()));
        assert!(limited.request("a", "c").is_err());
        assert!(limited.request("a", "other").is_ok());
    }

    #[test]
    fn beside_other_instances_a_client_gets_this_ones_part_of_the_rate() {
        let limited = limits(10, 3);
        limited.set_instances(3);
        // Bursts of twice the rate, split over three instances: two here.
        assert!((0..2).all(|_| limited.request("a", "c").is_ok()));
        assert!(limited.request("a", "c").is_err());
        // More instances than the burst allows: one request, then waits.
        let many = limits(10, 1);
        many.set_instances(50);
        assert!(many.request("a", "c").is_ok());
        assert!(many.request("a", "c").is_err());
    }
}

//! Dispatch: scheduled delivery to webhooks, Amazon SQS and Amazon SNS.

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod domain;
pub mod instances;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod portal;
pub mod retention;
pub mod schedules;
pub mod sealing;
pub mod serve;
pub mod service;
pub mod state;
pub mod store;
pub mod sweeper;
pub mod wake;
pub mod wire;

//! What the agent executors (claude-code, codex) share beyond the detached-run
//! machinery ([`crate::detached`], [`crate::wrapper`]): the turn's prompt
//! ([`prompt`]), the private per-Work record in the KV ([`continuity`]), the
//! structured turn status and how it reads as an outcome
//! ([`status`]), the executor-wide usage-limit hold ([`hold`]) and the secrets a
//! binding's `secret_env` sets for the agent ([`secret_env`]).

pub mod confine;
pub mod continuity;
pub mod hold;
pub mod prompt;
pub mod secret_env;
pub mod status;

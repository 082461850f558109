//! Shared daemon start-up: logging, readiness, watchdog, signals, socket activation and the bus client. Built in issue 3.

//! schedulerd: routing, attempts, leases, retries, waits and timers. Built in issue 7.

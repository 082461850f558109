//! The `open-conduit` command line. Built in issue 8.

//! extrunner: every extension as a supervised process with a scoped host. Built in issue 5.

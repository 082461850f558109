//! ingressd: socket-activated webhook intake. Built in issue 6.

//! storaged: the only process that opens the SQLite database. Built in issue 4.

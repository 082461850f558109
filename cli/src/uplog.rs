//! The logs `open-conduit up` keeps under `<state>/logs/`: each daemon's lines in
//! `<name>.log`, bounded. Past [`MAX_LOG_BYTES`] the file is renamed `<name>.log.1`
//! (replacing the one before) and a new one is started, so a daemon's log never takes
//! more than twice the bound. A line that cannot be written (a full disk) is lost,
//! never the daemon: the next line written says how many were lost and why.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

/// The most bytes of one daemon's log file before it is rotated.
pub const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// One daemon's log file, rotated at its bound.
#[derive(Debug)]
pub struct BoundedLog {
    path: PathBuf,
    file: Option<File>,
    size: u64,
    max: u64,
    lost: u64,
    why: String,
}

impl BoundedLog {
    /// The log at `path` (appended to), rotated past `max` bytes.
    pub fn open(path: PathBuf, max: u64) -> BoundedLog {
        let mut log = BoundedLog {
            path,
            file: None,
            size: 0,
            max,
            lost: 0,
            why: String::new(),
        };
        log.reopen(false);
        log
    }

    fn reopen(&mut self, truncate: bool) {
        let mut o = OpenOptions::new();
        o.create(true);
        if truncate {
            o.write(true).truncate(true);
        } else {
            o.append(true);
        }
        match o.open(&self.path) {
            Ok(f) => {
                self.size = f.metadata().map_or(0, |m| m.len());
                self.file = Some(f);
            }
            Err(e) => {
                self.file = None;
                self.why = e.to_string();
            }
        }
    }

    /// Appends `line` (and a newline), rotating first when it would pass the bound.
    pub fn line(&mut self, line: &str) {
        let mut text = String::new();
        if self.lost > 0 {
            text.push_str(&format!(
                "[open-conduit up: {} log lines lost: {}]\n",
                self.lost, self.why
            ));
        }
        text.push_str(line);
        text.push('\n');
        let len = text.len() as u64;
        if self.file.is_some() && self.size > 0 && self.size + len > self.max {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            if let Err(e) = std::fs::rename(&self.path, &old) {
                self.why = format!("cannot rotate {}: {e}", self.path.display());
            }
            self.reopen(true);
        }
        if self.file.is_none() {
            self.reopen(false);
        }
        let written = match self.file.as_mut() {
            Some(f) => f.write_all(text.as_bytes()).map_err(|e| e.to_string()),
            None => Err(self.why.clone()),
        };
        match written {
            Ok(()) => {
                self.size += len;
                self.lost = 0;
            }
            Err(e) => {
                self.lost += 1;
                self.why = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_log_is_rotated_at_its_bound_and_never_takes_more_than_twice_it() {
        let dir = std::env::temp_dir().join(format!("oc-uplog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("storaged.log");
        let mut log = BoundedLog::open(path.clone(), 1000);
        for i in 0..500 {
            log.line(&format!("line {i:04} of the daemon's log"));
        }
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.join("storaged.log.1")).unwrap();
        assert!(now.len() <= 1000 && before.len() <= 1000, "{now}\n{before}");
        assert!(now.ends_with("line 0499 of the daemon's log\n"), "{now}");
        assert!(before.lines().count() > 10, "{before}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_that_cannot_be_written_are_counted_and_said_once_they_can() {
        let dir = std::env::temp_dir().join(format!("oc-uplog-lost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("x.log");
        // No directory yet: nothing can be written.
        let mut log = BoundedLog::open(path.clone(), 1000);
        log.line("first");
        log.line("second");
        std::fs::create_dir_all(&dir).unwrap();
        log.line("third");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("[open-conduit up: 2 log lines lost: "),
            "{text}"
        );
        assert!(text.ends_with("]\nthird\n"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

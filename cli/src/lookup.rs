//! A Work named by a unique start of its ID, as the `work` and `ask` commands take it.

use std::path::Path;

use busapi::store::{WorkGetRequest, WorksRequest};

use crate::output::{call, Failure};

/// The Work `id` names: itself, or the one Work whose ID starts with it (with or
/// without `work_`), as git takes a unique prefix of a commit.
pub fn resolve_work(bus: &Path, id: &str) -> Result<String, Failure> {
    if call(bus, &WorkGetRequest { id: id.to_owned() }).is_ok() {
        return Ok(id.to_owned());
    }
    let prefix = if id.starts_with("work_") {
        id.to_owned()
    } else {
        format!("work_{id}")
    };
    // IDs are paged in order: those with the prefix come right after it.
    let page = call(
        bus,
        &WorksRequest {
            after: prefix.clone(),
            limit: 2,
            ..WorksRequest::default()
        },
    )?;
    let found: Vec<String> = page
        .works
        .into_iter()
        .map(|w| w.id)
        .filter(|w| w.starts_with(&prefix))
        .collect();
    match found.as_slice() {
        _ if id.trim_start_matches("work_").len() < 4 => {
            Err(format!("no such Work {id} (a shortened ID needs at least 4 characters)").into())
        }
        [one] => Ok(one.clone()),
        [] => Err(format!("no such Work {id}").into()),
        _ => Err(format!("{id} is the start of more than one Work: give more of its ID").into()),
    }
}

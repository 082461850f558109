//! `web login`: a login token for webd's API, for the person who runs it (or
//! `--name`), printed once; only its SHA-256 is kept (`webd::tokens`).

use std::path::Path;

use serde_json::json;

use crate::output::{print_json, Failure, Out};

/// The name a token is minted for: `--name`, else the user who runs the CLI
/// (`cli:<user>` becomes `web:<user>`).
pub fn login_name(name: Option<String>) -> String {
    name.unwrap_or_else(|| {
        let me = crate::asks::person();
        me.strip_prefix("cli:").unwrap_or(&me).to_owned()
    })
}

/// `web login [--name NAME] [--state DIR]`.
pub fn login(state: &Path, name: Option<String>, json_out: bool) -> Out {
    let name = login_name(name);
    let person = webd::tokens::person(&name).map_err(Failure::from)?;
    let token = webd::tokens::mint(state, &name).map_err(Failure::from)?;
    let file = webd::tokens::path(state);
    if json_out {
        print_json(&json!({"token": token, "person": person, "file": file}));
    } else {
        println!("{token}");
        eprintln!(
            "a login token for {person} (shown once; its SHA-256 is kept in {}). \
             Send it as: Authorization: Bearer <token>",
            file.display()
        );
    }
    Ok(())
}

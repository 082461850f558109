//! A repository's credential from a Bitbucket connection.
//!
//! When a `git` resource's `connection` is of type `bitbucket` (as `configure` sent
//! it) and the resource config does not name both `secret` and `username`, the
//! connection decides what it leaves out, as the Bitbucket package signs git in
//! ([`oc_bitbucket::credential::git_login_for`]): its `token` (a workspace or
//! repository access token) with the user name `x-token-auth`, else its
//! `app_password` with the connection config's `username`. So `{"connection": "bb"}`
//! is enough; a `secret` or `username` the resource names still wins. The secret is
//! resolved through the host when git needs it, as for any connection.

use crate::config::Credential;
use protocol::wire::Connection;
use protocol::{Code, RpcError};
use serde_json::Value;

/// The connection type whose secrets choose the credential.
pub const CONNECTION_TYPE: &str = oc_bitbucket::NAME;

/// `credential` with what a `bitbucket` `connection` chooses filled in; `None` when
/// there is nothing to fill (another type, no connection known, both named). An
/// error (`resource_setup_failed`, `data.what` `credential`) says what the
/// connection lacks, naming it and `repository`, never a secret.
pub fn credential_for(
    credential: &Credential,
    connection: Option<&Connection>,
    repository: &str,
) -> Result<Option<Credential>, RpcError> {
    let Some(connection) = connection.filter(|c| c.connection_type == CONNECTION_TYPE) else {
        return Ok(None);
    };
    if credential.explicit_secret && credential.explicit_username {
        return Ok(None);
    }
    let secret = credential
        .explicit_secret
        .then_some(credential.secret.as_str());
    let username = credential
        .explicit_username
        .then_some(credential.username.as_str());
    let (username, secret) = oc_bitbucket::credential::git_login_for(connection, secret, username)
        .map_err(|why| {
            let mut e = RpcError::new(
                Code::ResourceSetupFailed,
                format!(
                    "no credential for {repository}: {why} (a bitbucket connection signs git in with its token, or its username and app_password)"
                ),
            );
            if let Some(Value::Object(map)) = e.data.as_mut() {
                map.insert("what".into(), Value::String("credential".into()));
                map.insert("repository".into(), Value::String(repository.into()));
            }
            e
        })?;
    Ok(Some(Credential {
        secret,
        username,
        ..credential.clone()
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn bitbucket(config: Value, secrets: &[&str]) -> Connection {
        Connection {
            name: "bb".into(),
            connection_type: "bitbucket".into(),
            config,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn parsed(config: Value) -> Credential {
        let mut config = config;
        config["repository"] = json!("https://bitbucket.org/acme/widgets.git");
        crate::config::Config::check(&config, None)
            .unwrap()
            .credential
            .unwrap()
    }

    fn chosen(c: &Credential, conn: &Connection) -> (String, String) {
        let got = credential_for(c, Some(conn), "r").unwrap().unwrap();
        (got.username, got.secret)
    }

    #[test]
    fn a_bitbucket_connection_chooses_its_token_else_its_app_password() {
        let bare = parsed(json!({"connection": "bb"}));
        let token = bitbucket(json!({}), &["webhook_secret", "token"]);
        assert_eq!(
            chosen(&bare, &token),
            ("x-token-auth".into(), "token".into())
        );
        let app = bitbucket(
            json!({"username": "bot"}),
            &["webhook_secret", "app_password"],
        );
        assert_eq!(chosen(&bare, &app), ("bot".into(), "app_password".into()));
        // Both: the token.
        let both = bitbucket(json!({"username": "bot"}), &["token", "app_password"]);
        assert_eq!(
            chosen(&bare, &both),
            ("x-token-auth".into(), "token".into())
        );
    }

    #[test]
    fn what_the_resource_names_wins() {
        let both = bitbucket(json!({"username": "bot"}), &["token", "app_password"]);
        let named = parsed(json!({"connection": "bb", "secret": "app_password",
                                  "username": "someone"}));
        assert!(credential_for(&named, Some(&both), "r").unwrap().is_none());
        let secret_only = parsed(json!({"connection": "bb", "secret": "app_password"}));
        assert_eq!(
            chosen(&secret_only, &both),
            ("bot".into(), "app_password".into())
        );
        let user_only = parsed(json!({"connection": "bb", "username": "me"}));
        assert_eq!(chosen(&user_only, &both), ("me".into(), "token".into()));
    }

    #[test]
    fn other_connections_are_left_alone_and_a_lack_is_named() {
        let bare = parsed(json!({"connection": "bb"}));
        let mut github = bitbucket(json!({}), &["token"]);
        github.connection_type = "github".into();
        assert!(credential_for(&bare, Some(&github), "r").unwrap().is_none());
        assert!(credential_for(&bare, None, "r").unwrap().is_none());
        let nothing = bitbucket(json!({}), &["webhook_secret"]);
        let e = credential_for(&bare, Some(&nothing), "r").unwrap_err();
        assert!(e.is(Code::ResourceSetupFailed), "{e:?}");
        assert!(e.message.contains("\"bb\""), "{}", e.message);
        assert_eq!(e.data.unwrap()["what"], "credential");
        let no_user = bitbucket(json!({}), &["app_password"]);
        let e = credential_for(&bare, Some(&no_user), "r").unwrap_err();
        assert!(e.message.contains("no username"), "{}", e.message);
    }
}

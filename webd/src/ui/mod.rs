//! The web view: pages drawn on the server from the same reads the API answers
//! ([`crate::reads`]), with one small script (`static/app.js`, no build step) that
//! keeps them live from the stream of nudges and sends the buttons' actions through
//! the API with the session's CSRF token.
//!
//! Every page: the navigation, the person and a sign-out button, a live indicator
//! (`role=status`), and regions marked `data-refresh` that the script reads again
//! when the stream says something changed. Every value is escaped ([`esc`]); no
//! markup from a package or an event reaches a page.

mod draw;
mod work;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::Value;

use crate::auth::Who;
use crate::context::App;
use crate::http::{fail, full, query, respond, work_id, ApiError, Reply};
use crate::reads::{self, TraceAsk, WorkFilter};

pub use draw::esc;

/// The Events the deliveries page shows.
pub const DELIVERIES_SHOWN: u32 = 50;

/// What a page needs besides its body.
pub struct Frame<'a> {
    /// The `<title>` and `<h1>`.
    pub title: &'a str,
    /// The navigation entry it is under.
    pub nav: &'a str,
    /// The live stream it listens to.
    pub stream: String,
    /// The person, and the CSRF token of their session.
    pub who: Option<(&'a str, String)>,
}

const NAV: &[(&str, &str)] = &[
    ("/works", "Works"),
    ("/deliveries", "Deliveries"),
    ("/extensions", "Extensions"),
    ("/config", "Configuration"),
    ("/pages", "Pages"),
];

/// A whole page.
pub fn page(f: &Frame<'_>, body: &str) -> Reply {
    let mut nav = String::new();
    for (href, label) in NAV {
        let current = if *href == f.nav {
            " aria-current=\"page\""
        } else {
            ""
        };
        nav.push_str(&format!("<a href=\"{href}\"{current}>{label}</a>"));
    }
    let (who, csrf) = match &f.who {
        Some((person, csrf)) => (
            format!(
                "<div class=\"who\"><span>{}</span><form method=\"post\" action=\"/logout\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form></div>",
                esc(person),
                esc(csrf)
            ),
            csrf.clone(),
        ),
        None => (String::new(), String::new()),
    };
    let live = if f.stream.is_empty() {
        String::new()
    } else {
        "<span id=\"live\" class=\"live\" role=\"status\" aria-live=\"polite\">connecting…</span>"
            .to_owned()
    };
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"csrf-token\" content=\"{csrf}\">\
         <title>{title} · Open Conduit</title>\
         <link rel=\"stylesheet\" href=\"/static/style.css\">\
         <script src=\"/static/app.js\" defer></script></head>\
         <body data-stream=\"{stream}\">\
         <a class=\"skip\" href=\"#main\">Skip to the content</a>\
         <header><span class=\"brand\">Open Conduit</span><nav aria-label=\"Main\">{nav}</nav>{live}{who}</header>\
         <main id=\"main\"><h1>{title}</h1>\
         <div id=\"flash\" role=\"status\" aria-live=\"polite\"></div>{body}</main></body></html>\n",
        csrf = esc(&csrf),
        title = esc(f.title),
        stream = esc(&f.stream),
    );
    respond(StatusCode::OK, "text/html; charset=utf-8", full(html))
}

/// The sign-in page (`message`: why the last try failed).
pub fn login_page(next: &str, message: Option<&str>) -> Reply {
    let error = message
        .map(|m| format!("<p class=\"error\" role=\"alert\">{}</p>", esc(m)))
        .unwrap_or_default();
    let body = format!(
        "{error}<form method=\"post\" action=\"/login\" class=\"login\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label for=\"token\">Login token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus>\
         <p class=\"hint\">Print one on the server with <code>open-conduit web login --name YOU</code>.</p>\
         <button type=\"submit\">Sign in</button></form>",
        esc(next)
    );
    page(
        &Frame {
            title: "Sign in",
            nav: "",
            stream: String::new(),
            who: None,
        },
        &body,
    )
}

/// The page of an error.
pub fn error_page(e: &ApiError) -> Reply {
    let mut r = page(
        &Frame {
            title: "Something went wrong",
            nav: "",
            stream: String::new(),
            who: None,
        },
        &format!(
            "<p class=\"error\" role=\"alert\">{} ({})</p><p><a href=\"/works\">Back to the Works</a></p>",
            esc(&e.message),
            esc(&e.code)
        ),
    );
    *r.status_mut() = e.status;
    r
}

/// Answer a page request from `who`.
pub async fn route(app: &Arc<App>, req: Request<Incoming>, who: &Who) -> Result<Reply, ApiError> {
    if req.method() != Method::GET {
        return Err(fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} takes GET", req.uri().path()),
        ));
    }
    let path = req.uri().path().to_owned();
    let q = query(req.uri().query().unwrap_or(""))?;
    let csrf = app.auth.csrf(who);
    let frame = |title: &'static str, nav: &'static str| Frame {
        title,
        nav,
        stream: "/api/stream".to_owned(),
        who: Some((who.person.as_str(), csrf.clone())),
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let bus = &app.bus;
    match parts.as_slice() {
        [""] => Ok(crate::http::see_other("/works")),
        ["works"] => {
            let f = WorkFilter::from_query(&q)?;
            let list = reads::works(bus, &f).await?;
            Ok(page(&frame("Works", "/works"), &draw::works(&f, &list)))
        }
        ["works", id] => {
            let id = work_id(id)?;
            let story = reads::work(bus, &id).await?;
            let actions = bus
                .call_typed(&busapi::ext::ActionsRequest {
                    work_id: id.clone(),
                })
                .await
                .map(|a| serde_json::json!(a))
                .unwrap_or(Value::Null);
            let panels = bus
                .call_typed(&busapi::view::PanelsRequest {
                    work_id: id.clone(),
                })
                .await
                .map(|p| serde_json::json!(p))
                .unwrap_or(Value::Null);
            let title = format!("Work {id}");
            let f = Frame {
                title: &title,
                nav: "/works",
                stream: format!("/api/works/{}/stream", crate::http::percent_encode(&id)),
                who: Some((who.person.as_str(), csrf.clone())),
            };
            Ok(page(&f, &work::story(&id, &story, &actions, &panels)))
        }
        ["deliveries"] => {
            let events = reads::recent_events(bus, DELIVERIES_SHOWN).await?;
            Ok(page(
                &frame("Deliveries", "/deliveries"),
                &draw::deliveries(&events),
            ))
        }
        ["extensions"] => {
            let ext = reads::extensions(bus).await?;
            let hosts = reads::hosts(bus).await.unwrap_or(Value::Null);
            Ok(page(
                &frame("Extensions and hosts", "/extensions"),
                &draw::extensions(&ext, &hosts),
            ))
        }
        ["config"] => {
            let config = reads::config(bus).await?;
            let ask = TraceAsk::from_query(&q)?;
            let trace = match &ask {
                Some(t) => Some(reads::trace(bus, t).await),
                None => None,
            };
            let samples = reads::recent_events(bus, 20).await.unwrap_or(Value::Null);
            Ok(page(
                &frame("Configuration", "/config"),
                &draw::config(&config, ask.as_ref(), trace, &samples),
            ))
        }
        ["pages"] => {
            let pages = bus.call_typed(&busapi::view::PagesRequest {}).await?;
            Ok(page(
                &frame("Pages", "/pages"),
                &work::pages(&serde_json::json!(pages)),
            ))
        }
        ["pages", package, id] => {
            let pages = serde_json::json!(bus.call_typed(&busapi::view::PagesRequest {}).await?);
            let decl = pages["pages"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["package"] == *package && p["id"] == *id)
                .cloned()
                .ok_or_else(|| crate::http::not_found(format!("no page {package}/{id}")))?;
            let drawn = bus
                .call_typed(&busapi::view::PageRequest {
                    package: (*package).to_owned(),
                    page: (*id).to_owned(),
                })
                .await?;
            let title = decl["title"].as_str().unwrap_or(id).to_owned();
            let f = Frame {
                title: &title,
                nav: "/pages",
                stream: "/api/stream".to_owned(),
                who: Some((who.person.as_str(), csrf.clone())),
            };
            Ok(page(
                &f,
                &work::extension_page(&decl, &serde_json::json!(drawn)),
            ))
        }
        _ => Err(crate::http::not_found(format!("no page {path}"))),
    }
}

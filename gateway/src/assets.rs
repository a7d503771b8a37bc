//! The pages and the browser client library, built into the binary (they work wherever the
//! binary runs):
//!
//! | path | file |
//! |---|---|
//! | `/` | `web/pages/index.html`: a channel of any model, live (`?channel=<id>`, `?canvas=` too): a canvas to paint, a JSON document or value, a stream's last publications; connection status |
//! | `/fleet` | `web/pages/fleet.html`: node states, streaks, partitions, catch-up, decisions, and charts of the last minutes (`web/pages/charts.js`) |
//! | `/assets/{file}` | `web/pages/{file}`: the pages' scripts and style |
//! | `/client/{file}` | `web/client/{file}`: the client library (ES modules) |

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use shared::http::ApiError;

/// One embedded file: its name, content type and text.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($name:literal, $ty:expr, $path:literal) => {
        Asset { name: $name, content_type: $ty, body: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $path)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static PAGES: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8", "web/pages/index.html"),
    asset!("fleet.html", "text/html; charset=utf-8", "web/pages/fleet.html"),
    asset!("app.js", JS, "web/pages/app.js"),
    asset!("fleet.js", JS, "web/pages/fleet.js"),
    asset!("charts.js", JS, "web/pages/charts.js"),
    asset!("board.js", JS, "web/pages/board.js"),
    asset!("publish.js", JS, "web/pages/publish.js"),
    asset!("panels.js", JS, "web/pages/panels.js"),
    asset!("views.js", JS, "web/pages/views.js"),
    asset!("style.css", "text/css; charset=utf-8", "web/pages/style.css"),
];

static CLIENT: &[Asset] = &[
    asset!("fleet-client.js", JS, "web/client/fleet-client.js"),
    asset!("machine.js", JS, "web/client/machine.js"),
    asset!("canvas.js", JS, "web/client/canvas.js"),
    asset!("protocol.js", JS, "web/client/protocol.js"),
    asset!("index.js", JS, "web/client/index.js"),
];

/// The client library's models (`/client/models/{file}`), which `index.js` brings in.
static MODELS: &[Asset] = &[
    asset!("index.js", JS, "web/client/models/index.js"),
    asset!("canonical.js", JS, "web/client/models/canonical.js"),
    asset!("json.js", JS, "web/client/models/json.js"),
    asset!("latest.js", JS, "web/client/models/latest.js"),
    asset!("pixels.js", JS, "web/client/models/pixels.js"),
    asset!("stream.js", JS, "web/client/models/stream.js"),
];

fn serve(set: &[Asset], name: &str) -> Response {
    match set.iter().find(|a| a.name == name) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                // Built into the binary: a new binary may bring new files under the same names.
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            a.body,
        )
            .into_response(),
        None => ApiError::not_found(format!("no asset {name}")).into_response(),
    }
}

/// `GET /`.
pub async fn index() -> Response {
    serve(PAGES, "index.html")
}

/// `GET /fleet`.
pub async fn fleet() -> Response {
    serve(PAGES, "fleet.html")
}

/// `GET /assets/{file}`.
pub async fn page_asset(Path(name): Path<String>) -> Response {
    serve(PAGES, &name)
}

/// `GET /client/{file}`.
pub async fn client_asset(Path(name): Path<String>) -> Response {
    serve(CLIENT, &name)
}

/// `GET /client/models/{file}`.
pub async fn model_asset(Path(name): Path<String>) -> Response {
    serve(MODELS, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_module_the_library_imports_is_embedded() {
        for a in CLIENT {
            for line in a.body.lines().filter(|l| l.trim_start().starts_with("import ")) {
                if let Some(spec) = line.split('\'').nth(1).and_then(|s| s.strip_prefix("./")) {
                    let served = match spec.strip_prefix("models/") {
                        Some(model) => MODELS.iter().any(|c| c.name == model),
                        None => CLIENT.iter().any(|c| c.name == spec),
                    };
                    assert!(served, "{} imports {spec}, which is not served", a.name);
                }
            }
        }
        for a in MODELS {
            for line in a.body.lines().filter(|l| l.trim_start().starts_with("import ")) {
                let spec = line.split('\'').nth(1).unwrap_or_default();
                if let Some(up) = spec.strip_prefix("../") {
                    assert!(CLIENT.iter().any(|c| c.name == up), "models/{} imports {spec}, which is not served", a.name);
                } else if let Some(here) = spec.strip_prefix("./") {
                    assert!(MODELS.iter().any(|c| c.name == here), "models/{} imports {spec}, which is not served", a.name);
                }
            }
        }
    }

    #[test]
    fn pages_reference_only_served_files() {
        for page in PAGES.iter().filter(|a| a.name.ends_with(".html") || a.name.ends_with(".js")) {
            for (prefix, set) in [("/assets/", PAGES), ("/client/", CLIENT)] {
                for part in page.body.split(prefix).skip(1) {
                    let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).collect();
                    assert!(set.iter().any(|a| a.name == name), "{} references {prefix}{name}, which is not served", page.name);
                }
            }
            // A script's relative imports are of its own folder, /assets/.
            for line in page.body.lines().filter(|l| l.trim_start().starts_with("import ")) {
                if let Some(name) = line.split('\'').nth(1).and_then(|s| s.strip_prefix("./")) {
                    assert!(PAGES.iter().any(|a| a.name == name), "{} imports ./{name}, which is not served", page.name);
                }
            }
        }
    }
}

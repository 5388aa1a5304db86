//! One-time form tokens in a few lines: the form page gets a token from the `FormToken`
//! extractor (`hidden_input()`), and `VerifyFormTokenLayer` on the submit route spends it,
//! so a form is accepted once however often it is posted.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | an HTML form with a fresh token in a hidden input |
//! | `POST /messages` | under `VerifyFormTokenLayer`: the form (`form_token`, `text`) → `201` "Message N received."; the token again → `409`; no token → `400` |
//! | `GET /messages` | JSON: every message received, oldest first |
//!
//! Tokens are issued to the client, here the peer's IP address (the runtime's default);
//! a site behind a proxy would tell its browsers apart by their session cookie
//! (`ClientCookie`).

use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Html;
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use idem_axum::{FormToken, Idem, VerifyFormTokenLayer};
use serde::Deserialize;

/// The example: the messages its form has received.
#[derive(Debug, Clone)]
pub struct FormTokenExample {
    messages: Arc<Mutex<Vec<String>>>,
    idem: Idem,
}

impl Default for FormTokenExample {
    fn default() -> Self {
        Self::new()
    }
}

impl FormTokenExample {
    /// No message received yet.
    pub fn new() -> Self {
        Self {
            messages: Arc::default(),
            idem: Idem::builder().build(),
        }
    }

    /// The idem runtime of its routes, on a `MemoryStore`: what `main` drains when the
    /// server stops.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The routes, behind [`idem`](Self::idem).
    pub fn router(&self) -> Router {
        let verify = VerifyFormTokenLayer::new()
            .with_message("This form was already sent. Reload the page to send another message.");
        Router::new()
            .route("/", get(form))
            // A route layer covers the methods routed before it: the POST, not the GET.
            .route("/messages", post(receive).route_layer(verify).get(messages))
            .with_state(self.clone())
            .layer(self.idem.layer())
    }

    /// What `f` makes of the messages received.
    fn with_messages<T>(&self, f: impl FnOnce(&mut Vec<String>) -> T) -> T {
        f(&mut self.messages.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// `GET /`: the form, with a token only this page's submission can spend.
async fn form(token: FormToken) -> Html<String> {
    Html(format!(
        r#"<!doctype html>
<title>Leave a message</title>
<form method="post" action="/messages">
  {}
  <textarea name="text" required></textarea>
  <button>Send</button>
</form>
"#,
        token.hidden_input()
    ))
}

/// What the form posts, besides its token (which the layer took).
#[derive(Debug, Deserialize)]
struct Message {
    text: String,
}

/// `POST /messages`: runs once per token.
async fn receive(
    State(app): State<FormTokenExample>,
    Form(message): Form<Message>,
) -> (StatusCode, Html<String>) {
    let number = app.with_messages(|messages| {
        messages.push(message.text);
        messages.len()
    });
    let page = format!("<!doctype html><p>Message {number} received.</p>");
    (StatusCode::CREATED, Html(page))
}

/// `GET /messages`: every message received.
async fn messages(State(app): State<FormTokenExample>) -> Json<Vec<String>> {
    Json(app.with_messages(|messages| messages.clone()))
}

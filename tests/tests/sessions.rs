//! Clients told apart by their `tower_sessions::Session` (`identity::SessionClient`): a
//! browser's very first request gets its session, and with it the client its form will be
//! posted as; another browser is another client.

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::response::Html;
use axum::routing::{get, post};
use axum::{Form, Router, middleware};
use idem_axum::identity::{SessionClient, ensure_session};
use idem_axum::{FormToken, Idem, VerifyFormTokenLayer};
use idem_tests::{Shop, body_text, send};
use tower_sessions::{MemoryStore, Session, SessionManagerLayer};

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code, reason = "the form's own field, beside the token")]
    item: String,
}

async fn order_form(token: FormToken) -> Html<String> {
    Html(token.value().to_owned())
}

/// The form page of an application that also keeps something in the session, as most do.
async fn noted_order_form(session: Session, token: FormToken) -> Html<String> {
    session
        .insert("shown_form", true)
        .await
        .expect("a memory session store does not fail");
    Html(token.value().to_owned())
}

async fn place_order(State(shop): State<Shop>, Form(_order): Form<Order>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

fn app(shop: &Shop) -> Router {
    let idem = Idem::builder().with_client_identity(SessionClient).build();
    Router::new()
        .route("/form", get(order_form))
        .route("/noted-form", get(noted_order_form))
        .route(
            "/orders",
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .with_state(shop.clone())
        .layer(idem.layer())
        .layer(middleware::from_fn(ensure_session))
        .layer(SessionManagerLayer::new(MemoryStore::default()))
}

/// Opens the form without a cookie, as a new browser: its session cookie and its token.
async fn first_visit(app: &Router) -> (String, String) {
    let page = send(app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::OK);
    let cookie = page.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    (cookie, body_text(page).await)
}

async fn post_order(app: &Router, cookie: &str, token: &str) -> StatusCode {
    let request = Request::post("/orders")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("item=book&form_token={token}")))
        .unwrap();
    send(app, request).await.status()
}

#[tokio::test]
async fn a_new_browsers_first_page_gives_it_the_client_its_post_is() {
    let shop = Shop::new();
    let app = app(&shop);
    let (alice, token) = first_visit(&app).await;
    let (bob, _) = first_visit(&app).await;
    assert_ne!(alice, bob, "each browser its own session");

    assert_eq!(
        post_order(&app, &bob, &token).await,
        StatusCode::CONFLICT,
        "another session's token"
    );
    assert_eq!(post_order(&app, &alice, &token).await, StatusCode::CREATED);
    assert_eq!(
        post_order(&app, &alice, &token).await,
        StatusCode::CONFLICT,
        "spent"
    );
    assert_eq!(shop.runs(), 1);
}

/// The session cookie a response sets, as `name=value`.
fn set_cookie(response: &axum::response::Response) -> String {
    response.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A cookie naming a session the store does not have (expired, deleted, made up) starts a
/// new session before the page runs, so the form token the page issues belongs to the
/// session the browser is given, and its post is accepted. Taken at its word, the unknown
/// id was the client for that one request while the page's own session write gave the
/// browser another id, and the post was refused as another client's.
#[tokio::test]
async fn a_cookie_naming_an_unknown_session_gets_a_new_session_its_form_can_be_posted_from() {
    let shop = Shop::new();
    let app = app(&shop);
    let (known, _) = first_visit(&app).await;
    let name = known.split('=').next().unwrap();
    // A well-formed id (as the store writes them) that no session has.
    let unknown = format!("{name}=AAAAAAAAAAAAAAAAAAAAAA");

    let page = send(
        &app,
        Request::get("/noted-form")
            .header(header::COOKIE, &unknown)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(page.status(), StatusCode::OK);
    let given = set_cookie(&page);
    assert_ne!(given, unknown, "a new session, not the unknown one");
    let token = body_text(page).await;

    assert_eq!(post_order(&app, &given, &token).await, StatusCode::CREATED);
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn without_ensure_session_the_server_says_what_is_missing() {
    let idem = Idem::builder().with_client_identity(SessionClient).build();
    let app: Router = Router::new()
        .route("/form", get(order_form))
        .layer(idem.layer())
        .layer(SessionManagerLayer::new(MemoryStore::default()));
    let page = send(&app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(page).await.contains("ensure_session"));
}

use axum::extract::{FromRef, State};
use axum::routing::post;
use axum::Router;
use idem_axum::avoid_repeat;

#[derive(Clone)]
struct Counter;

#[avoid_repeat(timeout = "10s")]
async fn generic<S>(State(_state): State<S>) -> &'static str
where
    S: Clone + Send + Sync + 'static,
{
    "ok"
}

#[avoid_repeat(timeout = "10s", by = "client+body")]
async fn from_ref<S>(State(_counter): State<Counter>, _state: State<S>, body: String) -> String
where
    S: Clone + Send + Sync + 'static,
    Counter: FromRef<S>,
{
    body
}

#[derive(Clone)]
struct App {
    counter: Counter,
}

impl FromRef<App> for Counter {
    fn from_ref(app: &App) -> Counter {
        app.counter.clone()
    }
}

fn main() {
    let _: Router = Router::new()
        .route("/a", post(generic::<App>))
        .route("/b", post(from_ref::<App>))
        .with_state(App { counter: Counter });
}
